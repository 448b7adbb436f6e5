"""The one registry of the app's actions: bindings, the footer and the command palette are built from it."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

MAX_CHAT_SHORTCUTS = 9  # alt+1 .. alt+9


@dataclass(frozen=True)
class KeyAction:
    """One user action: its binding id (for keymaps), default key, action string and description."""

    id: str
    key: str
    action: str
    description: str
    help: str
    show: bool = True
    # Priority bindings win over the focused widget's own (the chat input's ctrl+w deletes a word).
    priority: bool = False
    in_palette: bool = True


ACTIONS: tuple[KeyAction, ...] = (
    KeyAction("new_chat", "ctrl+n", "new_chat", "New chat", "Open a chat on a free slot", priority=True),
    KeyAction("close_chat", "ctrl+w", "close_chat", "Close chat", "Close this chat and free its slot", priority=True),
    KeyAction("inspector", "f3", "inspector", "Inspector",
              "Show every slot live; go to its chat, stop its reply, clear its cache", priority=True),
    KeyAction("stop_reply", "escape", "stop_reply", "Stop", "Stop this chat's reply, keeping what was written"),
    KeyAction("quit", "ctrl+q", "quit", "Quit", "Quit mlxchat", priority=True, in_palette=False),
    *(
        KeyAction(
            f"goto_chat_{k}",
            f"alt+{k}",
            f"goto_chat({k})",
            f"Chat {k}",
            f"Go to chat {k}",
            show=False,
            in_palette=False,
        )
        for k in range(1, MAX_CHAT_SHORTCUTS + 1)
    ),
)


def bindings() -> list[Binding]:
    """The app's bindings, each with an id so that a keymap can remap it."""
    return [
        Binding(a.key, a.action, a.description, show=a.show, priority=a.priority, id=a.id) for a in ACTIONS
    ]


def palette_actions() -> list[KeyAction]:
    """The actions the command palette offers."""
    return [a for a in ACTIONS if a.in_palette]

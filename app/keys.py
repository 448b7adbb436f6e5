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
    KeyAction("chat_list", "ctrl+o", "chat_list", "Chats", "Reopen, search, rename or delete saved chats",
              priority=True),
    KeyAction("stop_reply", "escape", "stop_reply", "Stop", "Stop this chat's reply, keeping what was written"),
    KeyAction("regenerate", "ctrl+r", "regenerate", "Regenerate", "Write the last reply again", show=False,
              priority=True),
    KeyAction("edit_last", "ctrl+g", "edit_last", "Edit last", "Edit your last message and send it again",
              show=False, priority=True),
    KeyAction("chat_settings", "f5", "chat_settings", "Chat settings",
              "This chat's system prompt and sampling (temperature, top_p, top_k, max_tokens, seed)", show=False),
    KeyAction("copy_reply", "alt+c", "copy_reply", "Copy reply", "Copy the last reply to the clipboard", show=False),
    KeyAction("export_chat", "alt+e", "export_chat", "Export chat",
              "Write this chat to a Markdown file in the current folder", show=False),
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

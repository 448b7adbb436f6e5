"""The one registry of the app's actions: bindings, the footer and the command palette are built from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from textual.binding import Binding

from app.help_screen import KeyHelp

MAX_CHAT_SHORTCUTS = 9  # alt+1 .. alt+9
FOOTER_EVERYWHERE = ("help", "slots", "inspector")  # the ids of the keys every screen's footer shows


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
    KeyAction("help", "f1", "help", "Help", "Show every key and what it does", priority=True),
    KeyAction("slots", "f2", "slots", "Slots", "Set the number of slots and the total context",
              priority=True),
    KeyAction("inspector", "f3", "inspector", "Inspector", "Show what every slot is doing, live", priority=True),
    KeyAction("toggle_grid", "f4", "toggle_grid", "Grid", "Show the chats as tabs or side by side in a grid",
              priority=True),
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
    # alt+digit reaches the app only from terminals with the kitty keyboard protocol: these two
    # arrive from every terminal (and the palette lists the open chats).
    KeyAction("previous_chat", "ctrl+pageup", "cycle_chat(-1)", "Previous chat", "Go to the previous chat",
              show=False, priority=True),
    KeyAction("next_chat", "ctrl+pagedown", "cycle_chat(1)", "Next chat", "Go to the next chat",
              show=False, priority=True),
    *(
        # No description: the help screen gives the nine one line (goto_help).
        KeyAction(f"goto_chat_{k}", f"alt+{k}", f"goto_chat({k})", "", "", show=False, in_palette=False)
        for k in range(1, MAX_CHAT_SHORTCUTS + 1)
    ),
)


def bindings() -> list[Binding]:
    """The app's bindings, each with an id so that a keymap can remap it."""
    return [
        Binding(a.key, a.action, a.description, show=a.show, priority=a.priority, tooltip=a.help, id=a.id)
        for a in ACTIONS
    ]


def everywhere_bindings() -> list[Binding]:
    """The help, slots and inspector keys, run by the app, for screens whose footer would not show
    the app's own: the footer always shows these three."""
    return [
        Binding(a.key, f"app.{a.action}", a.description, tooltip=a.help, id=a.id)
        for a in ACTIONS if a.id in FOOTER_EVERYWHERE
    ]


def palette_actions() -> list[KeyAction]:
    """The actions the command palette offers."""
    return [a for a in ACTIONS if a.in_palette]


def goto_help(keymap: Mapping[str, str]) -> KeyHelp:
    """The help line of the go-to-chat keys, as `keymap` maps them."""
    first, last = (keymap.get(f"goto_chat_{k}", f"alt+{k}") for k in (1, MAX_CHAT_SHORTCUTS))
    return KeyHelp(
        f"{first} … {last}",
        # Textual reads a legacy terminal's alt+digit as the macOS Option character (alt+1 is "¡").
        f"Go to chat 1 … {MAX_CHAT_SHORTCUTS} (kitty-protocol terminals)",
        f"goto_chat_1 … {MAX_CHAT_SHORTCUTS}",
    )

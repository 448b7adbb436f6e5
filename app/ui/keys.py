"""The app's bindings, footer keys and palette entries, built from the one registry of actions (mlxchat.app.actions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from textual.binding import Binding

from mlxchat.app.actions import ACTIONS, FOOTER_EVERYWHERE, MAX_CHAT_SHORTCUTS, KeyAction, Scope


@dataclass(frozen=True)
class KeyHelp:
    """One line of help: the key as shown to the user and what it does."""

    key: str
    description: str
    action_id: str = ""  # what the config's [keys] table calls it, for actions that can be remapped


def bindings(pane: bool = False) -> list[Binding]:
    """The app's bindings, or with `pane` a chat pane's own (scope "pane"), each with an id so that a keymap
    can remap it."""
    return [
        Binding(a.key, a.action, a.description, show=a.show, priority=a.priority, tooltip=a.help, id=a.id)
        for a in ACTIONS if (a.scope == "pane") == pane
    ]


def everywhere_bindings() -> list[Binding]:
    """The help, slots and inspector keys, run by the app, for screens whose footer would not show
    the app's own: the footer always shows these three."""
    return [
        Binding(a.key, f"app.{a.action}", a.description, tooltip=a.help, id=a.id)
        for a in ACTIONS if a.id in FOOTER_EVERYWHERE
    ]


def key_for(action_id: str, keymap: Mapping[str, str]) -> str:
    """The key of action `action_id`, as `keymap` (the user's remapping) has it."""
    return keymap.get(action_id) or next(a.key for a in ACTIONS if a.id == action_id)


def scope_of(action: str) -> Scope | None:
    """Where the action named `action` may run (mlxchat.app.actions), or None for one outside the registry."""
    return next((a.scope for a in ACTIONS if a.name == action), None)


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

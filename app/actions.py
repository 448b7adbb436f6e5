"""The one registry of the app's actions, as plain data: settings check keymaps against it, the UI
builds its bindings, footer, help and command palette from it (mlxchat.app.ui.keys)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# Where an action can run: in the chat that has the keyboard, on that chat's own keys ("pane"); on the
# chats' screen once the engine runs ("chat"); over any screen once it runs ("screen": the slots and
# inspector); or always ("app").
Scope = Literal["pane", "chat", "screen", "app"]

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
    scope: Scope = "chat"

    @property
    def name(self) -> str:
        """The action's method name (`goto_chat` for "goto_chat(3)"), as Textual's check_action gets it."""
        return self.action.split("(", 1)[0]


ACTIONS: tuple[KeyAction, ...] = (
    KeyAction("help", "f1", "help", "Help", "Show every key and what it does", priority=True, scope="app"),
    KeyAction("slots", "f2", "slots", "Slots", "Set the number of slots and the total context",
              priority=True, scope="screen"),
    KeyAction("inspector", "f3", "inspector", "Inspector", "Show what every slot is doing, live", priority=True,
              scope="screen"),
    KeyAction("toggle_grid", "f4", "toggle_grid", "Grid", "Show the chats as tabs or side by side in a grid",
              priority=True),
    KeyAction("new_chat", "ctrl+n", "new_chat", "New chat", "Open a new chat", priority=True),
    KeyAction("close_chat", "ctrl+w", "close_chat", "Close chat", "Close this chat and free its slot", priority=True),
    KeyAction("chat_list", "ctrl+o", "chat_list", "Chats", "Reopen, search, rename or delete saved chats",
              priority=True),
    KeyAction("find_in_chat", "ctrl+f", "find_in_chat", "Find", "Find text in this chat: each match selected in turn",
              show=False, priority=True, scope="pane"),
    KeyAction("stop_reply", "escape", "stop_reply", "Stop",
              "Stop the reply (what was written stays) or take a queued message back"),
    KeyAction("goto_finished", "ctrl+l", "goto_finished", "Last finished", "Go to the chat whose reply ended last",
              show=False, priority=True),
    KeyAction("regenerate", "ctrl+r", "regenerate", "Regenerate", "Write the last reply again", show=False,
              priority=True, scope="pane"),
    KeyAction("edit_last", "ctrl+g", "edit_last", "Edit last", "Edit your last message and send it again",
              show=False, priority=True, scope="pane"),
    KeyAction("chat_settings", "f5", "chat_settings", "Chat settings",
              "This chat's system prompt, sampling (temperature, top_p, top_k, max_tokens, seed), reasoning, "
              "speculative decoding, and the tools its replies may call (with a restart for a server that failed)",
              show=False,
              scope="pane"),
    KeyAction("pick_model", "alt+m", "pick_model", "Model",
              "Switch to another model (the chats stay open): those here, a .gguf or folder path, or a Hub id",
              show=False, priority=True),
    KeyAction("fan_out", "f6", "fan_out", "Fan-out",
              "Send one prompt to 2-4 new chats with different settings, side by side", show=False, priority=True),
    KeyAction("keep_variant", "f7", "keep_variant", "Keep this one",
              "Keep this fan-out chat and close the others (they stay saved)", show=False, priority=True),
    # F-keys: a legacy terminal sends alt+f as ESC f, which Textual reads as ctrl+right (word forward).
    KeyAction("fork_chat", "f8", "fork_chat", "Fork chat",
              "Branch this chat at a message into a new chat (Enter: at the last one)", show=False,
              priority=True, scope="pane"),
    KeyAction("edit_earlier", "f9", "edit_earlier", "Edit a message",
              "Edit an earlier message of yours and send it again (the old turns stay saved)",
              show=False, priority=True, scope="pane"),
    # Priority: a terminal sends alt+letter as a printable key, which the message box would type.
    KeyAction("copy_reply", "alt+c", "copy_reply", "Copy reply", "Copy the last reply to the clipboard", show=False,
              priority=True, scope="pane"),
    # Not alt+b: terminals send it for option+left, and Textual reads it as ctrl+left.
    KeyAction("copy_code", "alt+shift+c", "copy_code", "Copy code block",
              "Copy one code block of this chat (a picker when there are several)", show=False, priority=True,
              scope="pane"),
    KeyAction("export_chat", "alt+e", "export_chat", "Export chat",
              "Write this chat to a Markdown file in the current folder", show=False, priority=True, scope="pane"),
    KeyAction("clear_input", "alt+x", "clear_input", "Clear the box",
              "Empty this chat's message box (ctrl+z in the box brings the text back)", show=False, priority=True,
              scope="pane"),
    KeyAction("remove_attachment", "alt+d", "remove_attachment", "Remove file",
              "Take the last file attached (@) off the message being written", show=False, priority=True,
              scope="pane"),
    KeyAction("toggle_reasoning", "alt+r", "toggle_reasoning", "Reasoning",
              "Open or fold the reasoning of this chat's last reply (the chat keeps the choice)", show=False,
              priority=True, scope="pane"),
    KeyAction("toggle_tools", "alt+o", "toggle_tools", "Tool calls",
              "Open the tool calls of this chat's last reply on their arguments and results, or fold them",
              show=False, priority=True, scope="pane"),
    KeyAction("toggle_timings", "alt+t", "toggle_timings", "Timings",
              "Show or hide each reply's timings: prompt tokens, cache hits, first token, speed", show=False,
              priority=True, scope="app"),
    KeyAction("quit", "ctrl+q", "quit", "Quit", "Quit mlxchat", priority=True, in_palette=False, scope="app"),
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


def key_clashes(keymap: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(key, first action id, second action id) for each key that `keymap` (the user's remapping, by action id;
    several keys separated by commas) would give two actions: the later binding would take it silently."""
    holder: dict[str, str] = {}
    clashes = []
    for action in ACTIONS:
        for key in (k.strip().lower() for k in keymap.get(action.id, action.key).split(",") if k.strip()):
            if key in holder and holder[key] != action.id:
                clashes.append((key, holder[key], action.id))
            holder.setdefault(key, action.id)
    return clashes

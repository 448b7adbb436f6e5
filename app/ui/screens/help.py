"""The help screen (F1): every key of the app and of its screens, as the user's keymap has them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.keys import format_key
from textual.screen import Screen
from textual.widgets import Header, Label, Static

from mlxchat.app.ui import keys
from mlxchat.app.ui.keys import KeyHelp
from mlxchat.app.ui.screens.inspector import InspectorScreen, SlotTable
from mlxchat.app.ui.screens.slots import SlotsScreen
from mlxchat.app.ui.widgets.chat_input import INPUT_KEYS
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.app.ui.widgets.slider import Slider
from mlxchat.app.ui.widgets.tool_widgets import ToolApproval


@dataclass(frozen=True)
class HelpSection:
    """The keys of one place in the app (everywhere, the message box, a screen)."""

    title: str
    keys: Sequence[KeyHelp]


def app_sections(keymap: Mapping[str, str]) -> list[HelpSection]:
    """Every key of the app and of its screens, as `keymap` has them."""
    return [
        bindings_section("Everywhere", keys.bindings(), keymap, extra=[keys.goto_help(keymap)]),
        bindings_section("In a chat (on the chat you are typing in)", keys.bindings(pane=True), keymap),
        HelpSection("In the message box", INPUT_KEYS),
        bindings_section("A tool call waiting for your approval (in the chat)", ToolApproval.BINDINGS, keymap,
                         remappable=False),
        bindings_section("Slots screen (F2)", [*SlotsScreen.BINDINGS, *Slider.BINDINGS], keymap, remappable=False),
        bindings_section("Slot inspector (F3)", [*InspectorScreen.BINDINGS, *SlotTable.BINDINGS], keymap,
                         remappable=False),
    ]


def _shown(key: str) -> str:
    """A key as the help names it: a punctuation key as its character (`equals_sign` is "="), the rest by name."""
    symbol = format_key(key)
    return symbol if len(symbol) == 1 and not symbol.isalnum() else key


def bindings_section(
    title: str,
    bindings: Sequence[BindingType],
    keymap: Mapping[str, str],
    extra: Sequence[KeyHelp] = (),
    remappable: bool = True,
) -> HelpSection:
    """The help of the bindings that have a description, each key as `keymap` (the user's remapping) has it.

    `remappable`: whether the config's [keys] table takes these ids (then shown in a column of their own).
    """
    lines: dict[tuple[str, str], list[str]] = {(k.description, k.action_id): [k.key] for k in extra}
    for b in Binding.make_bindings(bindings):
        if b.description:
            key = keymap.get(b.id, b.key) if b.id else b.key
            action_id = (b.id or "") if remappable else ""
            # make_bindings splits "a,b" into two bindings: their keys share one line again.
            shown = " / ".join(map(_shown, key.split(",")))
            lines.setdefault((b.tooltip or b.description, action_id), []).append(shown)
    return HelpSection(title, [KeyHelp(" / ".join(keys), *line) for line, keys in lines.items()])


def help_table(section: HelpSection) -> Table:
    """A section's keys as a table as wide as the page: the key and its [keys] id whole, what it does wrapped to
    the width left (a table that only scrolled sideways hid the ids, which remapping needs)."""
    table = Table(expand=True, box=None, padding=(0, 2, 0, 0), header_style="bold", show_edge=False)
    table.add_column("key", no_wrap=True, style="bold")
    remappable = any(k.action_id for k in section.keys)
    if remappable:
        table.add_column(Text("[keys] id"), no_wrap=True)  # Text: not read as markup
    table.add_column("does", ratio=1, overflow="fold")
    for k in section.keys:
        table.add_row(k.key, *((k.action_id,) if remappable else ()), k.description)
    return table


class HelpScreen(Screen[None]):
    """Lists every key; escape, F1 or q closes it. A screen, not a modal, so the app's F-keys still work."""

    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close help", priority=True)]
    CSS_PATH = "help.tcss"

    def __init__(self, sections: Sequence[HelpSection]) -> None:
        super().__init__()
        self._sections = sections

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(can_focus=True):
            for section in self._sections:
                yield Label(section.title, classes="help-title")
                yield Static(help_table(section), classes="help-table")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "Keys"
        self.query_one(VerticalScroll).focus()

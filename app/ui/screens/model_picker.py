"""The model picker: what runs here with no download (the default, .gguf files run before, mlxchat's conversions,
the Hugging Face cache), each with its size, kind and trained context; a Hub id or a path typed in its box goes too."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.fuzzy import Matcher
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from mlxchat.app.ui.screens.modal import AppModalScreen
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.engine import ModelEntry, format_bytes

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name
SOURCES = {"default": "default", "gguf": "GGUF", "converted": "converted GGUF", "hub": "HF cache"}


@dataclass(frozen=True)
class ModelChoice:
    """What the user picked: the model (as --model takes it; "" for the default), its name, and whether the config
    keeps it for the next start."""

    spec: str
    name: str
    save: bool


def missing_path(typed: str) -> bool:
    """Whether `typed` is a path (not a Hub id: it starts from a folder, has several parts, or names a .gguf) and
    nothing is there."""
    looks = typed.startswith(("/", "~", ".")) or typed.count("/") > 1 or typed.lower().endswith(".gguf")
    return bool(typed) and looks and not Path(typed).expanduser().exists()


def entry_line(entry: ModelEntry, current: bool) -> str:
    """A model as the list shows it: "● name · default · 98.4 MiB · Q4_1 · 8,192 tokens trained"."""
    trained = f"{entry.trained_ctx:,} tokens trained" if entry.trained_ctx else "trained context unknown"
    return (f"{'●' if current else ' '} {entry.name} · {SOURCES[entry.source]} · {format_bytes(entry.size_bytes)}"
            f" · {entry.kind} · {trained}")


class ModelPickerScreen(AppModalScreen[ModelChoice]):
    """Lists the models, filtered as the user types; enter switches to the highlighted one (or to the Hub id or path
    typed), ctrl+s does and keeps it in the config, escape cancels."""

    CSS_PATH = "model_picker.tcss"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "pick(True)", "Switch and keep", priority=True),
        Binding("down", "move(1)", show=False, priority=True),
        Binding("up", "move(-1)", show=False, priority=True),
    ]

    def __init__(self, entries: list[ModelEntry], current: str, running: str) -> None:
        """`current`: the running model's spec ("" for the default); `running`: its name."""
        super().__init__()
        self._entries = entries
        self._current_spec = current
        self._running_name = running
        self._shown: list[ModelEntry] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Models · running {self._running_name}", classes="dialog-title", markup=False)
            yield Input(placeholder="filter, or a Hub id (owner/name) to download, or a folder or .gguf path")
            yield OptionList()
            yield Static("enter: switch (the chats stay open) · ctrl+s: switch and keep it in the config · "
                         "escape: cancel", classes="dialog-hint", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self._show("")
        self.query_one(Input).focus()

    def _is_current(self, entry: ModelEntry) -> bool:
        return entry.spec == self._current_spec or (bool(entry.spec) and Path(entry.spec).expanduser().resolve()
                                                == Path(self._current_spec).expanduser().resolve())

    @on(Input.Changed)
    def _filter(self, event: Input.Changed) -> None:
        self._show(event.value)

    def _show(self, typed: str) -> None:
        matcher = Matcher(typed) if typed else None
        self._shown = [e for e in self._entries if matcher is None or matcher.match(e.name) > 0]
        listing = self.query_one(OptionList)
        listing.clear_options()
        listing.add_options([Option(Content(entry_line(e, self._is_current(e)))) for e in self._shown])
        if not self._shown:
            listing.add_option(Option(Content(self._typed_line(typed)), disabled=True))
        listing.highlighted = 0 if self._shown else None

    @staticmethod
    def _typed_line(typed: str) -> str:
        if missing_path(typed):
            return f"{typed}: no such file or folder"
        if HUB_ID.match(typed) and not Path(typed).expanduser().exists():
            return f"enter: download {typed} from Hugging Face (needs the network), then switch to it"
        if typed and Path(typed).expanduser().exists():
            return f"enter: open {typed}"
        return "No model here matches: type a Hub id (owner/name) or a path"

    def action_move(self, step: int) -> None:
        listing = self.query_one(OptionList)
        if self._shown:
            listing.highlighted = ((listing.highlighted or 0) + step) % len(self._shown)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_pick(False)

    @on(OptionList.OptionSelected)
    def _clicked(self) -> None:
        self.action_pick(False)

    def action_pick(self, save: bool) -> None:
        """Switches to the highlighted model, else to the Hub id or path typed."""
        highlighted = self.query_one(OptionList).highlighted
        if self._shown and highlighted is not None:
            entry = self._shown[highlighted]
            self.dismiss(ModelChoice(entry.spec, entry.name, save))
            return
        typed = self.query_one(Input).value.strip()
        if typed and Path(typed).expanduser().exists():
            self.dismiss(ModelChoice(typed, Path(typed).name, save))
        elif missing_path(typed):
            self.notify(f"{typed}: no such file or folder.", severity="warning")
        elif HUB_ID.match(typed):
            self.dismiss(ModelChoice(typed, typed, save))
        else:
            self.notify("Pick a model from the list, or type a Hub id (owner/name) or a path.", severity="warning")

    def action_cancel(self) -> None:
        self.dismiss(None)

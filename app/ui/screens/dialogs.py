"""A one-line text prompt in a modal dialog (the yes/no question is in confirm.py)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static

from mlxchat.app.ui.screens.modal import AppModalScreen
from mlxchat.app.ui.widgets.footer import Footer


class TextPromptScreen(AppModalScreen[str | None]):
    """Asks for one line of text; dismisses with it (stripped, never empty), or None on escape."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, value: str = "") -> None:
        super().__init__()
        self._title = title
        self._value = value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self._title, classes="dialog-title", markup=False)
            yield Input(self._value)
            yield Static("Enter: done · escape: cancel", classes="dialog-hint")
        yield Footer()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self.notify("Type something first, or press escape to cancel.", severity="warning")
            return
        self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)

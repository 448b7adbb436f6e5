"""Small modal dialogs: a yes/no question and a one-line text prompt."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

DIALOG_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 64; height: auto; max-width: 100%; border: round $primary; background: $surface; padding: 1 2;
}}
{name} .dialog-title {{ text-style: bold; margin-bottom: 1; }}
{name} .dialog-hint {{ color: $text-muted; margin-top: 1; }}
{name} Horizontal {{ height: auto; align-horizontal: right; margin-top: 1; }}
{name} Button {{ margin-left: 2; }}
"""


class ConfirmScreen(ModalScreen[bool]):
    """Asks a yes/no question; dismisses with True only for yes (y, or the Yes button)."""

    DEFAULT_CSS = DIALOG_CSS.format(name="ConfirmScreen")
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self._question = question
        self._yes = yes

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self._question, classes="dialog-title", markup=False)
            with Horizontal():
                yield Button("No", id="no")
                yield Button(self._yes, id="yes", variant="error")
            yield Static("y: yes · n or escape: no", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class TextPromptScreen(ModalScreen[str | None]):
    """Asks for one line of text; dismisses with it (stripped, never empty), or None on escape."""

    DEFAULT_CSS = DIALOG_CSS.format(name="TextPromptScreen")
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

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self.notify("Type something first, or press escape to cancel.", severity="warning")
            return
        self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)

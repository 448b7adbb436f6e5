"""A yes/no question in a modal dialog, for actions that throw something away."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from mlxchat.app.ui.screens.modal import AppModalScreen
from mlxchat.app.ui.widgets.footer import Footer


class ConfirmScreen(AppModalScreen[bool]):
    """Asks `question`; dismisses with True when the user confirms. The safe answer has the focus."""

    BINDING_GROUP_TITLE = "Confirm"
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]
    CSS_PATH = "confirm.tcss"

    def __init__(self, title: str, question: str, confirm_label: str) -> None:
        super().__init__()
        self._title = title
        self._question = question
        self._confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self._title, classes="confirm-title", markup=False)
            yield Static(self._question, classes="confirm-question", markup=False)
            with Horizontal():
                yield Button(f"{self._confirm_label} (y)", variant="error", id="confirm-yes")
                yield Button("Keep (n)", variant="primary", id="confirm-no")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def action_answer(self, yes: bool) -> None:
        """Closes the dialog with the answer."""
        self.dismiss(yes)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

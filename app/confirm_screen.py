"""A yes/no question in a modal box, for actions that change what the user has (slots, caches)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Asks before going on: dismisses with True for the confirm button, False for cancel or escape."""

    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel")]

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen #confirm-box {
        width: 72; max-width: 100%; height: auto;
        border: round $warning; background: $surface; padding: 1 2;
    }
    ConfirmScreen #confirm-question { margin-bottom: 1; }
    ConfirmScreen #confirm-buttons { height: auto; align-horizontal: right; }
    ConfirmScreen Button { margin-left: 2; }
    """

    def __init__(self, title: str, question: str, confirm_label: str) -> None:
        super().__init__()
        self._title = title
        self._question = question
        self._confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box") as box:
            box.border_title = self._title
            yield Static(self._question, id="confirm-question", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button(self._confirm_label, variant="warning", id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        # Cancel has the focus, so that a stray Enter keeps everything as it was.
        self.query_one("#cancel", Button).focus()

    @on(Button.Pressed)
    def _answer(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")

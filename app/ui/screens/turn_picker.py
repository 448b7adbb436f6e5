"""Picks one message of a chat (to fork at, or to edit and send again) from a list of its turns."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from mlxchat.app.chats.chat import ChatMessage
from mlxchat.app.ui.screens.modal import PickerScreen
from mlxchat.app.ui.widgets.footer import Footer

LINE_CHARS = 70
WHO = {"user": "you", "assistant": "reply"}


class TurnPickerScreen(PickerScreen[int]):
    """Lists `messages` (those at `choices`), the cursor on the last; dismisses with the index of the
    message picked, or None."""

    CSS_PATH = "turn_picker.tcss"

    def __init__(self, title: str, hint: str, messages: Sequence[ChatMessage], choices: Sequence[int]) -> None:
        super().__init__(choices)
        self._title = title
        self._hint = hint
        self._messages = messages

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self._title, classes="picker-title", markup=False)
            yield OptionList(*[Option(_line(i, self._messages[i]), id=str(i)) for i in self.values])
            yield Static(self._hint, classes="picker-hint", markup=False)
        yield Footer()


def _line(index: int, message: ChatMessage) -> str:
    """A turn as the list shows it: its number, who wrote it and its first words."""
    text = " ".join(message.text.split())
    text = text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1].rstrip() + "…"
    return f"{index + 1:>3}  {WHO[message.role]:<5}  {text}"

"""A chat's status line: its slot's state and fill, a slot lent away, its place in line."""

from __future__ import annotations

from textual.widgets import Static

from mlxchat.app.ui import slot_words
from mlxchat.engine import SlotSnapshot


class SeatLine(Static):
    """One line under the chat's input that says where the chat sits on the slots and what its slot does."""

    DEFAULT_CSS = "SeatLine { height: 1; padding: 0 1; background: $panel; color: $text-muted; }"

    def __init__(self) -> None:
        super().__init__(classes="slot-status", markup=False)
        self.text = ""

    def say(self, text: str) -> None:
        """Shows `text` (an idle app redraws nothing)."""
        if text == self.text:
            return
        self.text = text
        # One line of fixed height: no layout pass, which with many panes streaming costs the UI
        # thread far more than drawing the line (a whole-screen layout per update).
        self.update(text, layout=False)

    def idle(self, slot_id: int | None, history: bool) -> None:
        self.say(slot_words.idle(slot_id, history))

    def slot(self, slot: SlotSnapshot) -> None:
        """The slot's state, how full its context is (as a bar) and its speed."""
        self.say(slot_words.slot_line(slot))

    def lent(self, before: int | None) -> None:
        """The chat's slot went to another chat."""
        self.say(slot_words.slot_lent(before))

"""The message box: Enter sends, ctrl+j starts a new line, ↑ and ↓ walk through the chat's earlier prompts, @ attaches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from textual import events
from textual.message import Message

from mlxchat.app.ui.keys import KeyHelp
from mlxchat.app.ui.workarounds.freed_widgets import FreedTextArea

# The message box handles these keys itself (Enter must not reach the app): the help screen lists them.
INPUT_KEYS = (
    KeyHelp("enter", "Send the message"),
    KeyHelp("ctrl+j / shift+enter", "Start a new line (shift+enter only where the terminal reports it)"),
    KeyHelp("up / down", "On the first / last line: this chat's earlier / later prompts"),
    KeyHelp("@", "At the start of a word: attach a file (a picker over the files here; escape types the @)"),
)

class ChatInput(FreedTextArea):
    """The message box: Enter sends, ctrl+j (or shift+enter where the terminal reports it) starts a new line,
    ↑ on the first line and ↓ on the last walk through the chat's earlier prompts."""

    class Submitted(Message):
        """The user pressed Enter on this text."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class AtTyped(Message):
        """The user typed @ at the start of a word: a file to attach (the @ is not typed)."""

    def __init__(self, prompts: Callable[[], Sequence[str]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._prompts = prompts  # the chat's earlier prompts, oldest first
        self._recalled: int | None = None  # which prompt is shown (None: what the user is typing)
        self._draft = ""  # what was being typed before the first ↑
        # What was typed after an @ before the picker took the keyboard (keys typed at once, or faster than it
        # opens, reach the box first): the picker's filter, not the message.
        self._after_at: list[str] | None = None
        self._edits: dict[int, str] = {}  # recalled prompts changed in the box, kept while walking

    async def _on_key(self, event: events.Key) -> None:
        if self._after_at is not None and event.is_printable and event.character:
            event.stop()
            event.prevent_default()
            self._after_at.append(event.character)
            return
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self._recalled = None
            self._edits.clear()
            self.post_message(self.Submitted(self.text))
            return
        if event.key in ("ctrl+j", "shift+enter"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        if event.character == "@" and self._word_starts():
            event.stop()
            event.prevent_default()
            self._after_at = []
            self.post_message(self.AtTyped())
            return
        if event.key in ("up", "down") and self.selection.is_empty and self._recall(-1 if event.key == "up" else 1):
            event.stop()
            event.prevent_default()
            return
        await super()._on_key(event)

    def typed_after_at(self) -> str:
        """The characters typed after the @ until now (the picker's to filter by), and the box types again."""
        typed, self._after_at = "".join(self._after_at or []), None
        return typed

    def _word_starts(self) -> bool:
        """Whether the cursor is where a word would start (an @ inside a word, as in an address, is typed)."""
        row, column = self.cursor_location
        return self.selection.is_empty and (column == 0 or self.document.get_line(row)[column - 1].isspace())

    def _recall(self, step: int) -> bool:
        """Shows the prompt `step` away from the one shown (-1: older), when the cursor is on the first line
        (older) or the last (newer); False when the key is the cursor's to move."""
        at_edge = self.navigator.is_first_wrapped_line if step < 0 else self.navigator.is_last_wrapped_line
        if not at_edge(self.cursor_location):
            return False
        prompts = self._prompts()
        current = len(prompts) if self._recalled is None else self._recalled
        target = current + step
        if not 0 <= target <= len(prompts) or target == current:
            return False
        if self._recalled is None:
            self._draft = self.text
        elif self.text != prompts[current]:
            self._edits[current] = self.text
        self._recalled = None if target == len(prompts) else target
        self.text = self._draft if self._recalled is None else self._edits.get(target, prompts[target])
        # Going back the cursor stays on the first line, going forward on the last: the next press goes on.
        self.move_cursor(self.navigator.get_location_end((0, 0)) if step < 0 else self.document.end)
        return True

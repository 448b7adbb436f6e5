"""Find in the shown chat (ctrl+f): a bar over the message box; each match selected and scrolled into view.

The text searched is the text shown (a reply's Markdown as rendered, not its source), widget by
widget; the match is marked with Textual's own text selection, so it is exact to the character and
can be copied. A reply still streaming is searched once it has ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.geometry import Offset, Region
from textual.screen import Screen
from textual.selection import Selection
from textual.widget import Widget
from textual.widgets import Input, Static
from textual.widgets._collapsible import CollapsibleTitle

from mlxchat.app.ui.screens.modal import AppModalScreen
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.app.ui.widgets.reasoning_block import ReasoningBlock
from mlxchat.app.ui.widgets.reply_view import ReplyView

WATCH_S = 0.3  # how often an open find bar looks for text the chat has shown since


@dataclass(frozen=True)
class Match:
    """One occurrence: the widget showing it, and where in that widget's text (line, first and last column)."""

    widget: Widget
    line: int
    start: int
    end: int


def find_matches(conversation: Widget, query: str) -> list[Match]:
    """Every occurrence of `query` (ignoring case) in the text the conversation shows, top to bottom."""
    needle = query.casefold()
    if not needle or "\n" in needle:
        return []
    matches = []
    for widget in searched(conversation):
        shown = widget.get_selection(Selection(None, None))
        for line_number, line in enumerate(shown[0].splitlines() if shown else ()):
            # casefold keeps the length of most text; where it does not, offsets would drift: skip that line.
            folded = line.casefold()
            if len(folded) != len(line):
                continue
            start = folded.find(needle)
            while start != -1:
                matches.append(Match(widget, line_number, start, start + len(needle)))
                start = folded.find(needle, start + 1)
    return matches


def searched(conversation: Widget) -> list[Widget]:
    """The widgets whose text is searched: the turns and notes, the replies that have ended and their
    reasoning (folded or not; not the header a block shows)."""
    return [w for w in conversation.query("Static, ReplyView")
            if not (isinstance(w, ReplyView) and w.streaming) and not isinstance(w, CollapsibleTitle)]


class FindScreen(AppModalScreen[None]):
    """The find bar: typing searches, enter or ↑ goes to the match before, ↓ to the one after; escape closes."""

    CSS_PATH = "find.tcss"
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("up", "step(-1)", "Earlier", key_display="↑"),
        Binding("down", "step(1)", "Later", key_display="↓"),
        Binding("ctrl+f", "step(-1)", "Earlier", show=False),
    ]

    def __init__(self, chats: Screen, conversation: Widget, query: str = "") -> None:
        super().__init__()
        self._chats = chats  # the screen the conversation is on: its selection marks the match
        self._conversation = conversation
        self._query = query
        self._matches: list[Match] = []
        self._index = 0
        self._shown = 0  # how many text widgets the chat showed when it was last searched

    def compose(self) -> ComposeResult:
        with Vertical():
            with Horizontal():
                yield Input(self._query, placeholder="Find in this chat")
                yield Static(classes="find-count", markup=False)
            yield Static("enter or ↑: earlier match · ↓: later · escape: close", classes="find-hint")
        yield Footer()

    def on_mount(self) -> None:
        self._search()
        self.set_interval(WATCH_S, self._watch)

    @property
    def matches(self) -> list[Match]:
        """The matches of the text in the bar, top to bottom."""
        return self._matches

    @property
    def current(self) -> Match | None:
        """The match shown (selected and scrolled to)."""
        return self._matches[self._index] if self._matches else None

    @on(Input.Changed)
    def _changed(self) -> None:
        self._search()

    def _search(self) -> None:
        """Finds the bar's text afresh and shows the newest match: the reader is most often at the end."""
        self._matches = find_matches(self._conversation, self.query_one(Input).value)
        self._shown = len(searched(self._conversation))
        self._index = len(self._matches) - 1
        self._show()

    def _watch(self) -> None:
        """Searches again when the chat shows other text (a reply ended, a chat just opened drew its
        turns), staying on the match shown if it is still there."""
        if len(searched(self._conversation)) == self._shown:
            return
        current = self.current
        self._search()
        if current in self._matches:
            self._index = self._matches.index(current)
            self._show()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_step(-1)

    def action_step(self, step: int) -> None:
        """Goes to the match `step` places away (negative: earlier), wrapping around."""
        if self._matches:
            self._index = (self._index + step) % len(self._matches)
        self._show()

    def _show(self) -> None:
        query = self.query_one(Input).value
        count = self.query_one(".find-count", Static)
        match = self.current
        count.update("" if not query else f"{self._index + 1} of {len(self._matches)}" if match else "no match")
        count.set_class(bool(query) and match is None, "-none")
        if match is None:
            self._chats.selections = {}
            return
        self._chats.selections = {
            match.widget: Selection(Offset(match.start, match.line), Offset(match.end, match.line))
        }
        widget = match.widget
        block = next((a for a in widget.ancestors if isinstance(a, ReasoningBlock)), None)
        if block is not None:  # in a reply's reasoning: the block opens, and shows the line
            block.collapsed = False
            self.call_after_refresh(block.show_line, match.line)
            return
        # The match's line, not its widget: one reply can be many screens tall.
        y = widget.virtual_region.y + widget.styles.gutter.top + match.line
        self._conversation.scroll_to_region(Region(0, y, 1, 1), center=True, animate=False, immediate=True)

    def action_close(self) -> None:
        self._chats.selections = {}
        self.dismiss(None)

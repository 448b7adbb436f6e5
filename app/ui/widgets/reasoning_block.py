"""A reply's reasoning, in a block of its own above its answer: open while it streams (scrolling inside itself),
folded to one header line once the answer starts ("Thought for 12.4 s · 412 tokens")."""

from __future__ import annotations

import time
from dataclasses import dataclass

from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Collapsible, Static
from textual.widgets._collapsible import CollapsibleTitle

from mlxchat.app.chats.chat import thought_for

THINKING = "Thinking…"


class ReasoningBlock(Collapsible):
    """Textual's Collapsible holding the reasoning's text; its header says how long the model thought."""

    DEFAULT_CSS = """
    ReasoningBlock { background: $background; border-top: none; padding: 0 0 0 0; margin: 1 0 0 0; }
    ReasoningBlock CollapsibleTitle { color: $text-muted; padding: 0; }
    ReasoningBlock > Contents { padding: 0 0 0 2; }
    ReasoningBlock .reasoning-scroll { height: auto; max-height: 10; scrollbar-size-vertical: 1; }
    ReasoningBlock .reasoning-text { color: $text-muted; text-style: italic; }
    """

    @dataclass
    class Flipped(Message):
        """The user opened or folded the block (a click on its header, Enter on it)."""

        block: ReasoningBlock

    def __init__(self, text: str = "", header: str = THINKING, collapsed: bool = False) -> None:
        self._text = Static(text, classes="reasoning-text", markup=False)
        self._scroll = VerticalScroll(self._text, classes="reasoning-scroll")
        super().__init__(self._scroll, title=header, collapsed=collapsed, classes="reasoning")
        self.text = text

    def on_mount(self) -> None:
        self._scroll.anchor()  # (the newest reasoning stays in view while it streams)

    def show(self, text: str) -> None:
        """Draws `text` (the whole reasoning so far)."""
        self.text = text
        self._text.update(text)

    def fold(self, header: str, collapsed: bool) -> None:
        """The reasoning has ended: the header says for how long, and the block folds (or stays open)."""
        self.title = header
        self.collapsed = collapsed

    def show_line(self, line: int) -> None:
        """Scrolls the reasoning to its line `line`, and the conversation to the block."""
        self._scroll.scroll_to_region(Region(0, line, 1, 1), center=True, animate=False, immediate=True)
        self.scroll_visible(animate=False, immediate=True)

    def _on_collapsible_title_toggle(self, event: CollapsibleTitle.Toggle) -> None:
        # (Collapsible's own handler runs too, and flips the block: Textual calls each class's in turn.)
        self.post_message(self.Flipped(self))


class LiveReasoning:
    """The reasoning of the reply being written: its block, mounted above the answer once that is on the
    screen; when it started and its tokens so far, for the header it folds to when the answer starts."""

    def __init__(self) -> None:
        self.block: ReasoningBlock | None = None
        self._started = 0.0
        self._tokens = 0

    def came(self, tokens: int) -> None:
        """Reasoning text covering `tokens` tokens came."""
        if not self._tokens:
            self._started = time.monotonic()
        self._tokens += tokens

    def draw(self, view: Widget, answer: Widget | None, text: str, answered: bool, repaint: bool,
             keep_open: bool) -> None:
        """A frame: the block shows `text` while the reply reasons (when `repaint`); once `answered`, it folds
        (or stays open: `keep_open`, the chat's choice)."""
        if not text or answer is None:
            return
        if self.block is None:
            if not answer.is_attached:  # (the turns are mounted in their moment: the next frame mounts it)
                return
            self.block = ReasoningBlock()
            view.mount(self.block, before=answer)
        if self.block.title != THINKING:  # (folded already)
            return
        if answered:
            self.block.fold(thought_for(1000 * (time.monotonic() - self._started), self._tokens), not keep_open)
        elif repaint:
            self.block.show(text)

    async def ended(self, view: Widget, answer: Widget, reasoning: str) -> ReasoningBlock | None:
        """The reply has ended: its block, mounted now if no frame did (a reply that ended at once)."""
        if self.block is None and reasoning and answer.is_attached:
            self.block = ReasoningBlock()
            await view.mount(self.block, before=answer)
        return self.block

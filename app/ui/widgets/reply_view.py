"""A reply drawn as Markdown by one widget, however long: while it streams, and once it has ended.

Textual's Markdown widget makes a widget of every block, and each redraw that changes a widget's
height lays out the whole screen: with eight replies streaming in the grid that was most of the
UI's CPU, taken from the engine. This widget renders the reply with Rich's Markdown into lines
(one widget, however long the reply) and keeps the cost of a frame small:

- the blocks that can no longer change are rendered once; a frame renders the last ones only;
- only the lines that changed are repainted;
- the reply fills the pane's free room from the start, GROWTH_LINES at least (the conversation,
  anchored at its end, shows them under the message sent: the first words need no layout); a
  step before the text outgrows its room, the height is reserved a pane's height ahead, and the
  conversation is scrolled so that the newest line is at its bottom: the reserve stays out of view,
  a layout comes once a screenful, and the scroll a frame after it (in that frame's screen update,
  not in one of its own once the layout is done).

The gutter beside the text (a bar in the theme's primary colour) is drawn by this widget, beside each of
its lines: a border would run down the room reserved under them too, empty bars down to the input box.

A reply that has ended stays this widget, its height that of its lines: swapping it for Textual's
Markdown widget took 60-130 ms of the UI thread per reply (a widget and a style pass for every
block), and replies often end together. Saved replies are drawn by it too, so a reply looks the
same streaming, ended and reopened. Its text can be selected (mouse, find) as Textual's own.
"""

from __future__ import annotations

import re

from rich.segment import Segment
from rich.style import Style
from rich.theme import Theme
from textual.color import Color
from textual.events import Resize
from textual.geometry import Region, Size
from textual.selection import Selection
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widget import Widget

from mlxchat.app.ui.workarounds.laid_out_once import quiet_virtual_size
from mlxchat.app.ui.widgets.rich_markdown import markdown as rich_markdown

GROWTH_LINES = 4  # the conversation scrolls this many lines at a time; the least room reserved ahead
GUTTER = "\u2588 "  # beside each line: a bar, then a space (as a thick left border and its padding drew it)
LIST_ITEM = re.compile(r"(\d{1,9}[.)]|[-*+])(\s|$)")
FENCES = ("```", "~~~")


def finished_blocks_end(text: str, start: int) -> int:
    """Where the Markdown blocks of `text` that can no longer change end, looking from `start` (the
    start of a block, outside any code fence). A block is finished once a blank line and the whole
    first line of the next block follow it; not where that line is indented (it may go on with the
    block) or is a list item (the list may go on: Rich draws one list of loose items tighter than
    two lists)."""
    end, fence, blank, offset = start, "", False, start
    for line in text[start:].splitlines(keepends=True):
        stripped = line.lstrip(" ")
        marker = stripped[:3] if len(line) - len(stripped) <= 3 else ""
        if fence:
            fence = "" if marker == fence else fence
        elif not line.strip():
            blank = True
        else:
            if blank and line.endswith("\n") and not line[0].isspace() and not LIST_ITEM.match(line):
                end = offset
            blank = False
            fence = marker if marker in FENCES else ""
        offset += len(line)
    return end


class ReplyView(Widget):
    """The text of a reply, drawn as Markdown: streaming until `finish`, or ended from the start."""

    DEFAULT_CSS = "ReplyView { height: auto; } ReplyView > .reply-view--gutter { color: $primary; }"
    COMPONENT_CLASSES = {"reply-view--gutter"}
    virtual_size = quiet_virtual_size()  # (laid_out_once)

    def __init__(self, text: str = "", *, streaming: bool = False, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.text = text
        self._streaming = streaming
        if streaming:  # the room left in the pane from the start, GROWTH_LINES at least: the first lines need no layout
            self.styles.height = "1fr"  # (inline, not a class: a class taken off at the end restyled it, 2 ms a reply)
            self.styles.min_height = GROWTH_LINES
        self._lines: list[Strip] = []
        self._finished: list[Strip] = []  # the lines of the blocks that can no longer change
        self._finished_end = 0  # where those blocks end in the text
        self._rendered_for: tuple[int, str] | None = None  # the width and theme the finished lines have
        self._blank = Strip.blank(0)  # the blank line of that width and theme
        self._gutter = Strip.blank(0)  # the gutter in that theme
        self._reserved = 0
        self._styles: tuple[str, Theme] | None = None  # the Rich theme made for the app theme named
        self._edge: float | None = None  # where the conversation shows the newest line (see _live_edge)
        self._scroll_due = False  # a scroll to the edge waits for the layout that makes room for it

    @property
    def streaming(self) -> bool:
        """Whether the reply is still being written."""
        return self._streaming

    @property
    def following(self) -> bool:
        """Whether the conversation is kept at the newest line (the user has not scrolled away from it)."""
        conversation = self._conversation
        if conversation.scroll_y < 0:  # turns shorter than the view, bottom-aligned by the anchor: at the end
            return True
        if self._edge is None:  # no line yet: whether the conversation is at its end
            return conversation.scroll_y >= conversation.max_scroll_y - 1
        return self._scroll_due or conversation.scroll_y >= min(self._edge, conversation.max_scroll_y) - 1

    @property
    def _conversation(self) -> Widget:
        assert isinstance(self.parent, Widget)
        return self.parent

    def show(self, text: str) -> None:
        """Draws `text` (the whole reply so far)."""
        self.text = text
        self._render_lines()

    def finish(self, text: str) -> None:
        """The reply has ended with `text`: drawn whole, as tall as its lines from now on."""
        if not text.startswith(self.text[: self._finished_end]):  # (the blocks drawn are not this text's)
            self._rendered_for = None
        self.text = text
        self._streaming = False
        self._reserved = 0
        self.styles.height = None  # (back to the stylesheet's: auto)
        self.styles.min_height = None
        self._render_lines()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines_at(width - len(GUTTER)))

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The text shown under `selection`, line by line as drawn (for copying and for find)."""
        return selection.extract("\n".join(line.text.rstrip() for line in self._lines)), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()

    @property
    def text_width(self) -> int:
        """The columns the text is drawn in: the widget's content less its gutter."""
        return max(0, self.content_region.width - len(GUTTER))

    def _on_resize(self, event: Resize) -> None:
        self._render_lines()  # the lines at the new width (a layout measured them, not shown), the reserve for the height

    def _render_lines(self) -> None:
        width = self.text_width
        if width and self.text:
            self._repaint(self._lines_at(width))

    def _lines_at(self, width: int) -> list[Strip]:
        """The reply's lines at `width` columns, rendering only the blocks that may still change."""
        if width <= 0 or not self.text:
            return []
        if self._rendered_for != (width, self.app.theme):
            self._rendered_for, self._finished, self._finished_end = (width, self.app.theme), [], 0
            self._blank = Strip.blank(width, self.rich_style)
            style = self.rich_style + self.get_component_rich_style("reply-view--gutter", partial=True)
            self._gutter = Strip([Segment(GUTTER[0], style), Segment(GUTTER[1:], self.rich_style)], len(GUTTER))
        # An ended reply can no longer change anywhere: all of it joins the finished blocks.
        end = finished_blocks_end(self.text, self._finished_end) if self.streaming else len(self.text)
        if end > self._finished_end:
            self._finished = self._joined(self._finished, self._render(self.text[self._finished_end:end], width))
            self._finished_end = end
        rest = self.text[self._finished_end:]
        return self._joined(self._finished, self._render(rest, width)) if rest else self._finished

    def _render(self, markdown: str, width: int) -> list[Strip]:
        console = self.app.console
        code_theme = "monokai" if self.app.current_theme.dark else "default"
        renderable = rich_markdown(markdown, code_theme)
        with console.use_theme(self._theme()):
            lines = console.render_lines(renderable, console.options.update_width(width), pad=False)
        base = self.rich_style  # (the theme's text colour and background where Rich leaves them unset)
        return [
            Strip(list(Segment.apply_style(Segment.adjust_line_length(line, width), base)), width)
            if Segment.get_line_length(line) else self._blank
            for line in lines
        ]

    def _joined(self, above: list[Strip], below: list[Strip]) -> list[Strip]:
        """The lines of two runs of blocks, one under the other, spaced as Rich spaces blocks: a blank
        line between them, unless the lower run starts with one of its own (lists and quotes do)."""
        if not above or not below or below[0] is self._blank:
            return above + below
        return [*above, self._blank, *below]

    def _repaint(self, lines: list[Strip]) -> None:
        """Shows `lines`, repainting those that changed; reserves room and keeps the newest in view."""
        old, self._lines = self._lines, lines
        first = next((y for y, (a, b) in enumerate(zip(old, lines)) if a is not b and a != b), min(len(old), len(lines)))
        if changed := max(len(old), len(lines)) - first:
            self.refresh(Region(0, first, self.content_region.width, changed))
        if not self.streaming:
            if len(lines) != len(old) or not self.size.height:
                self.refresh(layout=True)
            return
        following = self.following
        shown = -(-len(lines) // GROWTH_LINES) * GROWTH_LINES  # the lines in view under the reply's top
        self._reserve(shown + GROWTH_LINES)  # (a step ahead: the next frame finds the room laid out)
        edge, self._edge = self._edge, self._live_edge(shown)
        if following and self._edge != edge:
            if shown <= self.size.height:
                self._scroll_to_edge()
            else:  # (the text came faster than a step: the conversation can scroll there once laid out)
                self._scroll_due = True
                self.call_after_refresh(self._scroll_to_edge)
        self._conversation.anchor(False)  # (the anchor would show the reserve: the reply scrolls instead)

    def _live_edge(self, shown: int) -> float:
        """Where the conversation shows `shown` lines of the reply at its bottom: the newest line with
        up to GROWTH_LINES - 1 blank ones under it, so that it scrolls a few lines at a time (each
        scroll redraws the whole pane)."""
        return max(0, self.virtual_region.y + shown - self._conversation.scrollable_content_region.height)

    def _scroll_to_edge(self) -> None:
        self._scroll_due = False
        if self.is_attached and self._edge is not None:
            self._conversation.scroll_to(y=self._edge, animate=False, immediate=True, release_anchor=False)

    def _reserve(self, needed: int) -> None:
        """Reserves room for `needed` lines and a pane's height more, where it has less. Until then the reply has
        the room left in the pane (its height from the start, 1fr, GROWTH_LINES at least)."""
        ahead = max(GROWTH_LINES, self._conversation.scrollable_content_region.height)
        height = self._reserved or self.size.height
        if needed <= height and not (self._reserved and needed < height - 2 * ahead):
            return
        self._reserved = needed + ahead
        self.styles.height = self._reserved  # (a layout: the reply takes more room)

    def render_line(self, y: int) -> Strip:
        if self._rendered_for is not None and self._rendered_for[1] != self.app.theme:
            self._lines = self._lines_at(self._rendered_for[0])  # (the theme changed: its colours)
        if y >= len(self._lines):  # (the room reserved under the text: no gutter)
            return Strip.blank(self.content_region.width, self.rich_style)
        line = self._lines[y]
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(y)) is not None:
            start, end = span
            end = line.cell_length if end == -1 else end
            before, chosen, after = line.divide([start, end, line.cell_length])
            # Over each cell's own style, as Textual draws a selection: its colour blended on the background.
            selected = VisualStyle.from_styles(self.screen.get_component_styles("screen--selection"))
            chosen = Strip(
                [Segment(text, (VisualStyle.from_rich_style(style or Style()) + selected).rich_style, control)
                 for text, style, control in chosen],
                chosen.cell_length,
            )
            line = Strip.join([before, chosen, after])
        return Strip.join([self._gutter, line.apply_offsets(0, y)])  # (the text's offsets: selections are in its columns)

    def _theme(self) -> Theme:
        """Rich's Markdown styles in the app theme's colours, as Textual's Markdown widget draws them."""
        if self._styles is None or self._styles[0] != self.app.theme:
            self._styles = (self.app.theme, self._make_theme())
        return self._styles[1]

    def _make_theme(self) -> Theme:
        variables = self.app.get_css_variables()
        background = Color.parse(variables["background"])

        def color(name: str) -> str:  # (blended onto the background: Rich has no transparency)
            return (background + Color.parse(variables[name])).hex6

        styles = {
            "markdown.code": f"bold {color('text-accent')} on {color('surface')}",
            "markdown.code_block": f"on {color('surface')}",
            "markdown.block_quote": color("foreground-muted"),
            "markdown.list": color("text-primary"),
            "markdown.item.bullet": f"bold {color('text-primary')}",
            "markdown.item.number": color("text-primary"),
            "markdown.link": color("text-accent"),
            "markdown.link_url": f"underline {color('text-accent')}",
            "markdown.table.border": color("text-primary"),
            "markdown.table.header": f"bold {color('text-primary')}",
        }
        for level in range(1, 7):  # headings as the app theme has them for Textual's Markdown
            text_style = variables.get(f"markdown-h{level}-text-style", "bold")
            styles[f"markdown.h{level}"] = f"{text_style} {color(f'markdown-h{level}-color')}"
        return Theme({name: Style.parse(style) for name, style in styles.items()})



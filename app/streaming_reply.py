"""A reply while it streams: one widget that draws the Markdown itself, growing in steps.

Textual's Markdown widget makes a widget of every block, and each redraw that changes a widget's
height lays out the whole screen: with eight replies streaming in the grid that was most of the
UI's CPU, taken from the engine. This widget renders the reply with Rich's Markdown into lines
(one widget, however long the reply), and reserves its height a few lines at a time, so most
frames only repaint it. When the reply ends, the chat shows it with Textual's Markdown widget.
"""

from __future__ import annotations

from rich.markdown import Markdown as RichMarkdown
from rich.style import Style
from rich.theme import Theme
from textual.color import Color
from textual.events import Resize
from textual.strip import Strip
from textual.widget import Widget

GROWTH_LINES = 4  # the height is reserved this many lines at a time: one layout per step, not per line


class StreamingReply(Widget):
    """The text of a reply being written, drawn as Markdown."""

    DEFAULT_CSS = "StreamingReply { height: 0; }"

    def __init__(self, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.text = ""
        self._lines: list[Strip] = []
        self._reserved = 0
        self._styles: tuple[str, Theme] | None = None  # the Rich theme made for the app theme named

    def show(self, text: str) -> None:
        """Draws `text` (the whole reply so far)."""
        self.text = text
        self._render_lines()

    def _on_resize(self, event: Resize) -> None:
        self._render_lines()

    def _render_lines(self) -> None:
        width = self.content_region.width
        if not width or not self.text:
            return
        console = self.app.console
        code_theme = "monokai" if self.app.current_theme.dark else "default"
        markdown = RichMarkdown(self.text, code_theme=code_theme, inline_code_theme=code_theme)
        with console.use_theme(self._theme()):
            lines = console.render_lines(markdown, console.options.update_width(width), pad=True)
        base = self.rich_style  # (the theme's text colour and background where Rich leaves them unset)
        self._lines = [Strip(line, width).apply_style(base) for line in lines]
        needed = len(self._lines)
        if needed > self._reserved or needed < self._reserved - GROWTH_LINES:
            self._reserved = -(-needed // GROWTH_LINES) * GROWTH_LINES
            self.styles.height = self._reserved  # (a layout: the reply takes more room)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        if y < len(self._lines):
            return self._lines[y]
        return Strip.blank(self.content_region.width, self.rich_style)

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

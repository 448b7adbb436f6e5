"""Rich's Markdown renderable without a parser of its own per text.

Rich's Markdown sets up a MarkdownIt parser for every text it is given: 0.21 of the 0.24 ms it takes for
a streaming reply's last paragraph, and a round of eight chats in the grid renders about 40 of them. Here
one parser, set up as Rich sets up its own, parses every text, and the renderable is a copy of one made
once per code theme (so that whatever else Rich's constructor sets, it has).
"""

from __future__ import annotations

import copy
from functools import cache

from markdown_it import MarkdownIt
from rich.markdown import Markdown

_PARSER = MarkdownIt().enable("strikethrough").enable("table")  # (as rich.markdown.Markdown.__init__ has it)


def markdown(text: str, code_theme: str) -> Markdown:
    """Rich's Markdown of `text`, its code blocks and inline code in `code_theme`."""
    made = copy.copy(_blank(code_theme))
    made.markup, made.parsed = text, _PARSER.parse(text)
    return made


@cache
def _blank(code_theme: str) -> Markdown:
    return Markdown("", code_theme=code_theme, inline_code_theme=code_theme)

"""The replies' Markdown, parsed by one shared parser, draws as Rich's own Markdown draws it."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.markdown import Markdown

from mlxchat.app.ui.widgets.rich_markdown import markdown

TEXT = """# A title

Some **bold**, *italic*, `code` and ~~struck~~ words, a [link](https://example.com).

| name | value |
| ---- | ----- |
| a    | 1     |

```python
print("hello")
```

1. one
2. two

> quoted
"""


@pytest.mark.parametrize("code_theme", ["monokai", "default"])
def test_shared_parser_draws_as_rich_does(code_theme: str) -> None:
    console = Console(width=50, color_system="truecolor")
    for text in (TEXT, "plain words", ""):
        own = Markdown(text, code_theme=code_theme, inline_code_theme=code_theme)
        assert console.render_lines(markdown(text, code_theme), pad=False) == console.render_lines(own, pad=False)

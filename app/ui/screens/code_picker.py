"""The code block picker: the chat's code blocks, the newest selected, the highlighted one shown in full."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from mlxchat.app.chats.code_blocks import CodeBlock
from mlxchat.app.ui.screens.modal import PickerScreen
from mlxchat.app.ui.widgets.footer import Footer

FIRST_LINE_CHARS = 60


class CodePickerScreen(PickerScreen[CodeBlock]):
    """Lists code blocks to copy one; dismisses with the chosen block, or None."""

    CSS_PATH = "code_picker.tcss"

    def __init__(self, blocks: Sequence[CodeBlock]) -> None:
        """The newest block is under the cursor: Enter copies the last block of the last reply."""
        super().__init__(blocks)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Copy a code block", classes="dialog-title")
            yield OptionList(*(Option(_line(number, block)) for number, block in enumerate(self.values, 1)))
            with VerticalScroll(can_focus=False):
                yield Static(classes="code-preview", markup=False)
            yield Static("Enter copies · ↑/↓ choose · escape cancels", classes="dialog-hint")
        yield Footer()

    @property
    def highlighted(self) -> CodeBlock | None:
        """The block under the list's cursor."""
        index = self.query_one(OptionList).highlighted
        return None if index is None else self.values[index]

    @on(OptionList.OptionHighlighted)
    def _preview(self) -> None:
        block = self.highlighted
        self.query_one(".code-preview", Static).update(block.code if block is not None else "")



def _line(number: int, block: CodeBlock) -> Text:
    """A block as the list shows it: its number, language, size and reply, then its first line."""
    first = next((line.strip() for line in block.code.splitlines() if line.strip()), "")
    if len(first) > FIRST_LINE_CHARS:
        first = first[: FIRST_LINE_CHARS - 1] + "…"
    line = Text(f"{number:>2}  {block.describe()} · reply {block.reply}\n", style="bold")
    line.append(f"    {first}", style="dim")
    return line

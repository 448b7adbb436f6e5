"""A terminal smaller than the app supports: one line that says so, over everything, until the terminal grows."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Static

# The smallest terminal the app supports: below it the inspector's table, the slots screen's summary and
# buttons, and a chat's turns no longer fit.
MIN_WIDTH, MIN_HEIGHT = 80, 24


def too_small_words(size: Size) -> str:
    """One short line (it must fit the small terminal it is shown in)."""
    return f"mlxchat needs {MIN_WIDTH}×{MIN_HEIGHT} or more (now {size.width}×{size.height}) · ctrl+q quits"


class TooSmallScreen(Screen[None]):
    """Covers every screen while the terminal is too small; the app takes it away once it is large enough."""

    CSS_PATH = "too_small.tcss"

    def __init__(self, size: Size) -> None:
        super().__init__()
        self._size = size

    def compose(self) -> ComposeResult:
        yield Static(too_small_words(self._size), id="too-small", markup=False)

    def show(self, size: Size) -> None:
        self.query_one("#too-small", Static).update(too_small_words(size))


def fit_to_terminal(app: App[int], size: Size) -> None:
    """Shows TooSmallScreen over the app while `size` is below the smallest supported, and takes it away after."""
    small = size.width < MIN_WIDTH or size.height < MIN_HEIGHT
    shown = isinstance(app.screen, TooSmallScreen)
    if small and not shown:
        app.push_screen(TooSmallScreen(size))
    elif small:
        app.screen.show(size)  # type: ignore[attr-defined]
    elif shown:
        app.pop_screen()

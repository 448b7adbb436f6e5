"""Screens of the slots screen (F2), compared with the accepted SVGs in __snapshots__."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens import slots
from mlxchat.engine import memory
from tests.markers import needs_cpu
from tests.pilot import make_app, ready, steady_cursors

# The accepted screens hold replies of random-weight models as the CPU computes them, and this machine's
# figures: a GPU writes other tokens.
pytestmark = needs_cpu

SIZE = (100, 36)
GIB = 1024**3


@pytest.fixture(autouse=True)
def _steady_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory figures differ by machine and by the minute: the screenshots show fixed ones."""
    monkeypatch.setattr(slots, "memory_info", lambda: memory.MemoryInfo(16 * GIB, 9 * GIB))


def on_slots_screen(app: ChatApp, *keys: str) -> Callable[[Pilot], Awaitable[None]]:
    """Opens F2 once the app is ready and presses `keys` there."""

    async def run_before(pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("f2")
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause()
        steady_cursors(app)

    return run_before


def test_slots_screen_without_warning(ascii_model_dir: Path, snap_compare: Any) -> None:
    """F2 as it opens on --parallel 4 --ctx-size 8192, the slider moved to 8: 1024 per slot, no warning."""
    app = make_app(ascii_model_dir, parallel=4, ctx_size=8192)
    assert snap_compare(app, terminal_size=SIZE, run_before=on_slots_screen(app, *["right"] * 4))


def test_slots_screen_with_floor_warning(ascii_model_dir: Path, snap_compare: Any) -> None:
    """8 slots of a 4096 total: 512 per slot, below the 1024 floor, warned before anything is applied."""
    app = make_app(ascii_model_dir, parallel=4, ctx_size=8192)
    keys = ["end", "tab", "end", *["backspace"] * 4, *"4096"]
    assert snap_compare(app, terminal_size=SIZE, run_before=on_slots_screen(app, *keys))

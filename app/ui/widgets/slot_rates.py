"""Each slot's recent decode speed as a sparkline (the inspector's), so a user sees where the machine saturates."""

from __future__ import annotations

from collections import deque

from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Sparkline, Static

from mlxchat.engine import EngineSnapshot

SAMPLES = 40  # the most recent speeds each sparkline keeps: 10 s at the inspector's refresh rate


def recent_rates(before: EngineSnapshot, after: EngineSnapshot, seconds: float) -> dict[int, float]:
    """Tokens per second each slot generated between two snapshots `seconds` apart (0 for a new reply)."""
    generated = {s.id: s.generated for s in before.slots}
    return {
        s.id: max(0, s.generated - generated.get(s.id, s.generated)) / seconds if seconds > 0 else 0.0
        for s in after.slots
    }


class SlotRates(VerticalScroll):
    """One line per slot: its id, its latest tok/s and a sparkline of the last SAMPLES of them."""

    DEFAULT_CSS = """
    SlotRates { height: auto; max-height: 9; padding: 0 1; }
    SlotRates > Horizontal { height: 1; }
    SlotRates .rate-label { width: 20; }
    SlotRates Sparkline { width: 1fr; }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._history: dict[int, deque[float]] = {}
        self._lines: dict[int, tuple[Static, Sparkline]] = {}
        self._last: tuple[float, EngineSnapshot] | None = None

    def record(self, snapshot: EngineSnapshot, now: float) -> None:
        """Adds each slot's speed since the previous snapshot; re-partitioned slots start afresh."""
        previous, self._last = self._last, (now, snapshot)
        ids = [s.id for s in snapshot.slots]
        if list(self._history) != ids:
            self._history = {i: deque([0.0], maxlen=SAMPLES) for i in ids}
            self._lines = {i: (Static(f"slot {i}      – tok/s", classes="rate-label"), Sparkline([0.0])) for i in ids}
            self.remove_children()
            self.mount_all(Horizontal(*line) for line in self._lines.values())
            return
        if previous is None:
            return
        for slot_id, rate in recent_rates(previous[1], snapshot, now - previous[0]).items():
            history = self._history[slot_id]
            history.append(rate)
            label, sparkline = self._lines[slot_id]
            sparkline.data = list(history)
            label.update(f"slot {slot_id}  {rate:5.1f} tok/s")

"""Which way the CPU llama path runs fastest on this machine, measured on it and remembered with its identity.

Two candidates: each matmul split in two halves on two MLX CPU streams with the BLAS at one
thread (engine.cpu.llama), or mlx-lm's plain layers with the BLAS's own threads. Which wins
depends on the CPU, its core count and the BLAS (OpenBLAS's threads do not speed up a
batched matmul on 2 cores; MKL's or many cores' may), so it is measured, never assumed:
`mlxchat doctor --tune` times both on the loaded model and saves the result in the user
cache, keyed by the machine (CPU model, cores, BLAS) and the model's shape.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from mlxchat.engine.devices import cpu_model
ROWS = (1, 8)  # decode passes of one slot and of a full default pool
STEPS = 6  # timed steps per candidate and row count (after one warm-up step)
CONTEXT = 128  # tokens each row attends to while timed


@dataclass(frozen=True)
class Tuning:
    """The measured choice for one machine and one model shape."""

    machine: str
    model: str
    split: bool
    step_ms: dict[str, dict[str, float]]  # candidate ("split", "plain") -> rows -> median step ms
    measured_at: str

    def describe(self) -> str:
        """One line for `doctor` and the bench header."""
        way = "matmuls split on two streams" if self.split else "plain matmuls on the BLAS's threads"
        rows = "/".join(str(r) for r in ROWS)
        times = "; ".join(
            f"{name} {'/'.join(f'{ms:.0f}' for ms in by_rows.values())} ms" for name, by_rows in self.step_ms.items()
        )
        return f"{way} (measured {self.measured_at[:10]}, step at {rows} rows: {times})"


@functools.cache  # the same for the whole process; every engine start asks
def machine_identity() -> str:
    """What the choice depends on besides the model: the CPU, its cores and the BLAS MLX really calls."""
    from mlxchat.engine.cpu.blas import blas_in_use

    blas = blas_in_use()
    return f"{cpu_model()} | {os.cpu_count()} cores | {blas.kind} {blas.path or ''}".strip()


def model_identity(model: Any) -> str:
    """The model's family, width, depth and weight dtype: what sets the size of each matmul."""
    inner = model.model
    weight = inner.layers[0].mlp.gate_proj.weight
    family = type(model).__module__.rsplit(".", 1)[-1]
    return f"{family} {weight.shape[1]}x{len(inner.layers)} {str(weight.dtype).rsplit('.', 1)[-1]}"


def tunable(model: Any) -> bool:
    """Whether the model has ways to run on this device to choose from (llama on a CPU)."""
    from mlxchat.engine.forward import Forward

    return Forward(model, split=False).tunable


def load_tuning(model: Any, path: Path) -> Tuning | None:
    """The choice measured on this machine for this model's shape, if `tune` ever saved one in `path`."""
    if not tunable(model):
        return None
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    key = (machine_identity(), model_identity(model))
    for entry in entries if isinstance(entries, list) else []:
        try:
            tuning = Tuning(**entry)
        except TypeError:  # written by another version: measured again on the next --tune
            continue
        if (tuning.machine, tuning.model) == key:
            return tuning
    return None


def tune(model: Any, path: Path, on_candidate: Callable[[str], None] | None = None) -> Tuning:
    """Times both candidates on `model` at every ROWS count, saves the choice in `path` and returns it."""
    from mlxchat.engine.forward import Forward
    from mlxchat.engine.kv import attention

    attention.install(model)  # the slot caches' attention, as the engine runs it
    candidates = {"split": Forward(model, split=True), "plain": Forward(model, split=False)}
    times: dict[str, dict[int, list[float]]] = {name: {r: [] for r in ROWS} for name in candidates}
    for rows in ROWS:
        for name, forward in candidates.items():
            if on_candidate:
                on_candidate(f"{name}, {rows} row{'s' if rows > 1 else ''}")
            _step(forward, model, rows)  # warm-up
        for _ in range(STEPS):
            for name, forward in candidates.items():  # taking turns, so load on the machine hits both
                times[name][rows].append(_step(forward, model, rows))
    step_ms = {name: {str(r): 1000 * statistics.median(ts) for r, ts in by_rows.items()} for name, by_rows in times.items()}
    total = {name: sum(by_rows.values()) for name, by_rows in step_ms.items()}
    tuning = Tuning(
        machine=machine_identity(),
        model=model_identity(model),
        split=total["split"] <= total["plain"],
        step_ms=step_ms,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    _save(tuning, path)
    return tuning


def _step(forward: Any, model: Any, rows: int) -> float:
    """Seconds for one decode pass of `rows` rows over CONTEXT cached tokens each."""
    import mlx.core as mx

    from mlxchat.engine.kv.slot_store import SlotKVStore

    store = SlotKVStore(rows, CONTEXT + 1, len(model.model.layers))
    store.lengths = [CONTEXT] * rows
    inputs = mx.zeros((rows, 1), dtype=mx.int32)
    forward.working(True)
    try:
        start = time.perf_counter()
        mx.eval(mx.argmax(forward.logits(inputs, store.batch(list(range(rows)), 1), None), axis=-1))
        return time.perf_counter() - start
    finally:
        forward.working(False)


def _save(tuning: Tuning, path: Path) -> None:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        entries = []
    kept = [e for e in entries if isinstance(e, dict) and (e.get("machine"), e.get("model")) != (tuning.machine, tuning.model)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([*kept, asdict(tuning)], indent=2) + "\n")

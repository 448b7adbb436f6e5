"""Which way the CPU llama path runs fastest on this machine, measured on it and remembered with its identity.

Two candidates: each matmul split in two halves on two MLX CPU streams with the BLAS at one
thread (engine.cpu.llama), or mlx-lm's plain layers with the BLAS's own threads. Which wins
depends on the CPU, its core count and the BLAS (OpenBLAS's threads do not speed up a
batched matmul on 2 cores; MKL's or many cores' may), so it is measured, never assumed:
`mlxchat doctor --tune` times both on the loaded model and saves the result in the user
cache, keyed by the machine (CPU model, cores, BLAS) and the model's shape.

Here is what is measured, for which machine and model, and the choice; the engine's forward pass
runs the candidates (engine.forward.tune builds them and hands `measure` a pass to time).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
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


def model_identity(model: Any) -> str | None:
    """The model's family, width, depth and weight dtype: what sets the size of each matmul; None for a model that
    is not mlx-lm's llama, the only family with ways to choose from (engine.cpu.llama)."""
    from mlxchat.engine.cpu.llama import LLAMA_MODULE

    if type(model).__module__ != LLAMA_MODULE:
        return None
    inner = model.model
    weight = inner.layers[0].mlp.gate_proj.weight
    return f"llama {weight.shape[1]}x{len(inner.layers)} {str(weight.dtype).rsplit('.', 1)[-1]}"


def load_tuning(model: Any, path: Path) -> Tuning | None:
    """The choice measured on this machine for this model's shape, if `tune` ever saved one in `path`: the forward
    pass is built with its `split` (a model with one way to run ignores it)."""
    key = (machine_identity(), model_identity(model))
    if key[1] is None:
        return None
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for entry in entries if isinstance(entries, list) else []:
        try:
            tuning = Tuning(**entry)
        except TypeError:  # written by another version: measured again on the next --tune
            continue
        if (tuning.machine, tuning.model) == key:
            return tuning
    return None


def measure(model: Any, path: Path, seconds: Callable[[bool, int], float],
            on_candidate: Callable[[str], None] | None = None) -> Tuning:
    """Times both candidates at every ROWS count, `seconds(split, rows)` being one decode pass of `rows` rows over
    CONTEXT cached tokens each; saves the choice in `path` and returns it."""
    identity = model_identity(model)
    assert identity is not None, "only llama has ways to choose from"
    candidates = {"split": True, "plain": False}
    times: dict[str, dict[int, list[float]]] = {name: {r: [] for r in ROWS} for name in candidates}
    for rows in ROWS:
        for name, split in candidates.items():
            if on_candidate:
                on_candidate(f"{name}, {rows} row{'s' if rows > 1 else ''}")
            seconds(split, rows)  # warm-up
        for _ in range(STEPS):
            for name, split in candidates.items():  # taking turns, so load on the machine hits both
                times[name][rows].append(seconds(split, rows))
    step_ms = {name: {str(r): 1000 * statistics.median(ts) for r, ts in by_rows.items()} for name, by_rows in times.items()}
    total = {name: sum(by_rows.values()) for name, by_rows in step_ms.items()}
    tuning = Tuning(
        machine=machine_identity(),
        model=identity,
        split=total["split"] <= total["plain"],
        step_ms=step_ms,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    _save(tuning, path)
    return tuning


def _save(tuning: Tuning, path: Path) -> None:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        entries = []
    kept = [e for e in entries if isinstance(e, dict) and (e.get("machine"), e.get("model")) != (tuning.machine, tuning.model)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([*kept, asdict(tuning)], indent=2) + "\n")

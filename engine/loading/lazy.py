"""Evaluates the arrays mlx-lm's modules build lazily at construction (scaled-RoPE frequencies and the like)."""

from __future__ import annotations

from typing import Any

import mlx.core as mx


def materialize(model: Any) -> None:
    """Evaluates every array a module holds outside its parameters, on the calling thread.

    Llama 3 / YaRN / longrope RoPE keep `_freqs` as a lazy graph made on the loading thread's
    stream; the engine's thread cannot evaluate it ("There is no Stream(cpu, 0) in current
    thread"), so it must be computed before the model is handed over.
    """
    hidden = [v for m in model.modules() for v in vars(m).values() if isinstance(v, mx.array)]
    mx.eval(hidden, model.parameters())

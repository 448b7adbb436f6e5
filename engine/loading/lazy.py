"""Evaluates every array a model holds, on the thread that built them, before the engine's thread sees it.

MLX gives each thread its own streams: an array whose graph was built on one thread cannot be
evaluated on another ("There is no Stream(cpu, 1) in current thread"). mlx-lm's modules build
some arrays lazily where `parameters()` does not look: Llama 3 / YaRN / longrope RoPE keep
`_freqs` (a name with `_` is not a parameter), others keep tables in lists, nested objects or
caches filled on their first call.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

import mlx.core as mx
import mlx.nn as nn

STREAM_ERROR = "in current thread"  # what MLX says when a graph made on another thread is evaluated


def held_arrays(model: Any) -> list[mx.array]:
    """Every mx.array reachable from `model`: module items and attributes, lists, tuples, dicts, and the
    attributes of the objects they hold (not functions, classes or Python modules)."""
    found: list[mx.array] = []
    seen: set[int] = set()
    stack = [model]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, mx.array):
            found.append(obj)
        elif isinstance(obj, dict):  # nn.Module is a dict: its arrays and children are items
            stack.extend(obj.values())
            if isinstance(obj, nn.Module):
                stack.extend(vars(obj).values())
        elif isinstance(obj, (list, tuple, set)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not (inspect.isroutine(obj) or isinstance(obj, (type, types.ModuleType))):
            stack.extend(vars(obj).values())
    return found


def materialize(model: Any) -> None:
    """Evaluates every array the model holds, on the calling thread (which must be the one that built them)."""
    mx.eval(held_arrays(model))


def is_stream_error(exc: BaseException) -> bool:
    """Whether `exc` is MLX refusing a graph that was built on another thread."""
    return isinstance(exc, RuntimeError) and "Stream(" in str(exc) and STREAM_ERROR in str(exc)


STREAM_HELP = (
    "the model holds an array that was computed lazily on another thread, which MLX cannot evaluate here; "
    "load it with mlxchat's load_model, or evaluate everything it holds (engine.loading.lazy.materialize) "
    "on the thread that loaded it"
)


def failure_message(exc: Exception) -> str:
    """What a failure in the engine says to the user: MLX refusing another thread's graph gets its reason in words."""
    return STREAM_HELP if is_stream_error(exc) else f"{type(exc).__name__}: {exc}"

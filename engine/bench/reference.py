"""The model mlx-lm's runners play: mlx-lm at its fastest on this device, and the memory it holds.

Where the engine keeps quantized layers as stored for its compiled kernels (engine.cpu.stored),
mlx-lm would multiply by them with MLX's own quantized matmul, which on a CPU is 10-30x slower
than float32 through the BLAS at 8 rows. The bench gives mlx-lm a float32 copy instead, the
way the engine itself held such a model before it had kernels. Both models then stay loaded
for the whole bench; each run's peak memory leaves out the one it does not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

_copies: dict[int, tuple[Any, int]] = {}  # id(loaded model) -> (float32 copy, its bytes)


def model(loaded: LoadedModel) -> Any:
    """The model mlx-lm runs: `loaded`'s own, or its float32 copy where the engine keeps stored layers."""
    from mlxchat.engine.cpu.stored import holds_stored

    if not holds_stored(loaded.model):
        return loaded.model
    if id(loaded.model) not in _copies:
        from mlx.utils import tree_flatten

        from mlxchat.engine.bench.registry import BenchRefused
        from mlxchat.engine.loading.models import float_model

        if loaded.source.kind == "shape":
            raise BenchRefused("mlx-lm's float32 copy of a quantized model is read from its folder, and a --shape "
                               "model has none: on a CPU, measure --shape --bits with --engines mlxchat")

        copy = float_model(loaded.mlx_path)
        _copies[id(loaded.model)] = (copy, sum(p.nbytes for _, p in tree_flatten(copy.parameters())))
    return _copies[id(loaded.model)][0]


def describe(loaded: LoadedModel) -> str:
    """What mlx-lm runs, where it is not `loaded`'s own model; "" where it is."""
    from mlxchat.engine.cpu.stored import holds_stored

    if not holds_stored(loaded.model):
        return ""
    return ("a float32 copy of the model, its fastest form on a CPU (its own quantized matmul does not gain "
            "from batching); the peak memory of each run leaves out the other engine's model")


def idle_bytes(loaded: LoadedModel, mlx_lm: bool) -> int:
    """Bytes held by the model a run does not use (the other engine's), to leave out of its peak memory."""
    if id(loaded.model) not in _copies:
        return 0
    return loaded.weights_bytes if mlx_lm else _copies[id(loaded.model)][1]


def forget(loaded: LoadedModel) -> None:
    """Frees the float32 copy made for `loaded`, if any."""
    _copies.pop(id(loaded.model), None)

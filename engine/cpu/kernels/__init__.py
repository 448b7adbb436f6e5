"""mlxchat's compiled CPU kernels (the C++ beside this file), and whether this process runs them.

`pip install .` and `make setup` build them with CMake against the installed mlx wheel (setup.py); on x86 as
one module per level (levels.py), of which this process loads the best one built that the CPU runs, or the one
MLXCHAT_ISA names. Where none was built (no compiler), none fits this CPU or this mlx, one fails its
self-test, or MLXCHAT_KERNELS=off, the engine runs MLX's own operations instead; `mlxchat doctor` says which.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from mlxchat.engine.cpu.kernels import levels

OFF_VARIABLE = "MLXCHAT_KERNELS"
# A folder whose modules are loaded instead of those beside this file: the sanitizer build (make test-sanitize).
BUILD_VARIABLE = "MLXCHAT_KERNELS_FROM"
if os.environ.get(BUILD_VARIABLE):
    __path__.insert(0, os.environ[BUILD_VARIABLE])
# The cores a threaded kernel call spreads over: those this process may run on.
THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
REBUILD = "`make setup` or `pip install .` with a C++ compiler and CMake builds them"


@dataclass(frozen=True)
class KernelStatus:
    """Whether the compiled kernels run in this process, and a line saying why (or why not)."""

    active: bool
    detail: str
    module: Any = None


@cache
def status() -> KernelStatus:
    """Loads and checks the compiled kernels once per process."""
    if os.environ.get(OFF_VARIABLE, "").lower() in ("0", "off", "false", "no"):
        return KernelStatus(False, f"off ({OFF_VARIABLE}={os.environ[OFF_VARIABLE]}): MLX's own operations run")
    import mlx.core as mx  # first: it loads the libmlx the kernels link to

    name, why_not = _module_name()
    if name is None:
        return KernelStatus(False, f"{why_not}: MLX's own operations run")
    try:
        ext = importlib.import_module(f"{__name__}.{name}")
    except ImportError as exc:
        return KernelStatus(False, f"not built ({exc}): MLX's own operations run; {REBUILD}")
    if ext.mlx_version != mx.__version__:
        return KernelStatus(False, f"built for mlx {ext.mlx_version}, but mlx {mx.__version__} is installed: "
                                   "MLX's own operations run (`make setup` rebuilds them)")
    problem = _self_test(ext)
    if problem:
        return KernelStatus(False, f"failed their self-test ({problem}): MLX's own operations run")
    return KernelStatus(True, f"compiled attention, norms, RoPE, matmul over stored weights, a stored llama's "
                              f"decode layers as one operation and top-k sampling, "
                              f"{ext.isa()} code path{_levels_note(name)}; int8 activations on the "
                              f"{ext.int8_path()} path", ext)


def built_levels() -> list[str]:
    """The x86 levels whose module was built here, best first."""
    return [level for level in levels.LEVELS
            if importlib.util.find_spec(f"{__name__}.{levels.module_name(level)}") is not None]


def _module_name() -> tuple[str | None, str]:
    """The module to load here, or None and why none."""
    if not levels.x86():
        return "_ext", ""
    built, runs, asked = built_levels(), levels.runnable(), levels.asked()
    if asked != "auto":
        if asked not in levels.LEVELS:
            return None, f"{levels.RUN_VARIABLE}={asked} is not one of auto, {', '.join(levels.LEVELS)}"
        if asked not in runs:
            return None, f"{levels.RUN_VARIABLE}={asked}: this CPU cannot run that path (its best is {runs[0]})"
        if asked not in built:
            return None, (f"{levels.RUN_VARIABLE}={asked}: that path was not built here (built: "
                          f"{', '.join(built) or 'none'}; `{levels.BUILD_VARIABLE}=all make setup` builds every one)")
        return levels.module_name(asked), ""
    usable = [level for level in runs if level in built]
    if usable:
        return levels.module_name(usable[0]), ""
    if not built:
        return None, f"not built; {REBUILD}"
    return None, (f"built for {', '.join(built)} only, which this CPU cannot run (its best is {runs[0]}: a "
                  "checkout moved from another machine?); `make setup` builds them for this one")


def _levels_note(name: str) -> str:
    """What doctor adds to the path: why this one ran, and which others were built."""
    if not levels.x86():
        return ""
    forced = f"{levels.RUN_VARIABLE}={levels.asked()}, " if levels.asked() != "auto" else ""
    return f" ({forced}built here: {', '.join(built_levels())})"


def active_here() -> bool:
    """Whether the kernels run in this process and serve its default device (the CPU: they have no GPU code)."""
    import mlx.core as mx

    return status().active and mx.default_device().type == mx.cpu


def _self_test(ext: Any) -> str | None:
    """A small attention over K/V in each stored type, a 4-bit matmul, a top-k and an RMSNorm against MLX's own,
    on this CPU; None when they agree."""
    import mlx.core as mx

    try:
        with mx.stream(mx.cpu):
            weights = mx.quantize(mx.random.normal((24, 64), key=mx.random.key(3)), 32, 4)
            x = mx.random.normal((3, 64), key=mx.random.key(4))
            product = ext.weights_matmul(x, list(weights), 4, 32, False, 2)[0]
            if not mx.allclose(product, x @ mx.dequantize(*weights, 32, 4).T, atol=1e-4).item():
                return "its matmul differs from MLX's"
            _, ids = ext.top_k(x, 5, 1)
            if not mx.array_equal(ids, mx.argsort(-x, axis=-1)[:, :5].astype(mx.uint32)).item():
                return "its top-k differs from MLX's sort"
            weight = mx.random.normal((64,), key=mx.random.key(5))
            if not mx.allclose(ext.rms_norm(x, weight, 1e-5), mx.fast.rms_norm(x, weight, 1e-5), atol=1e-5).item():
                return "its RMSNorm differs from MLX's"
            keys = mx.random.normal((2, 2, 24, 32), key=mx.random.key(0))
            values = mx.random.normal((2, 2, 24, 32), key=mx.random.key(1))
            queries = mx.random.normal((1, 4, 3, 32), key=mx.random.key(2))
            error = 0.0
            # Every way the slots may store K/V (engine.kv.kv_types), read as stored, against the widened values.
            for stored in (lambda x: [x], lambda x: [x.astype(mx.float16)], lambda x: [x.astype(mx.bfloat16)],
                           lambda x: list(mx.quantize(x, 32, 8))):
                k, v = stored(keys), stored(values)
                wide_k, wide_v = (p[0].astype(mx.float32) if len(p) == 1 else mx.dequantize(*p, 32, 8) for p in (k, v))
                got = ext.slot_attention(queries, k, v, mx.array([1]), mx.array([20]), 0.35, 1)
                want = mx.fast.scaled_dot_product_attention(
                    queries, wide_k[1:, :, :20], wide_v[1:, :, :20], scale=0.35, mask="causal"
                )
                error = max(error, mx.abs(got - want).max().item())
    except Exception as exc:  # a module that cannot even run is reported, never used
        return f"{type(exc).__name__}: {exc}"
    return None if error < 1e-4 else f"its attention differs from MLX's by {error:.2e}"

"""Which MLX device runs the model, and what the machine under it is: decides defaults and what `doctor` shows."""

from __future__ import annotations

import os
import platform
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

# The x86 vector extensions that change how fast a CPU multiplies (shown by doctor and the bench).
VECTOR_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "amx_tile")


# MLX's CUDA backend reads this when it starts: "0" keeps float32 matmuls off TF32.
TF32_VARIABLE = "MLX_ENABLE_TF32"


def use_exact_matmuls(exact: bool) -> str:
    """With `exact`, makes MLX multiply float32 without TF32 on CUDA; returns a note when it came too late.

    Must run before the first `import mlx.core`, as engine.cpu.blas.load_blas must; `exact=False`
    leaves MLX's own default (TF32 on) and MLX_ENABLE_TF32 as the environment has them.
    """
    if not exact or os.environ.get(TF32_VARIABLE) == "0":
        return ""
    os.environ[TF32_VARIABLE] = "0"
    if "mlx.core" in sys.modules:
        return "exact = true came too late: mlx.core was already imported"
    return ""


def batching_note(kind: str, dtype: str, kernels: bool = False, int8: bool = False) -> str:
    """Whether a batched reply is the same as the prompt's reply alone on this device and dtype, and whether a row's
    logits are the same bits, in words.

    `kernels`: the quantized or half-precision layers are multiplied by mlxchat's compiled matmul
    (engine.cpu.stored), whose rows do not depend on the rows beside them (tests/engine/test_batch_invariance.py:
    the same bits); `int8`: by rows rounded to int8 (int8_activations). float32 through a BLAS or a GPU's matmul is
    not bit for bit: the library picks its kernel by the number of rows."""
    tf32 = kind == "cuda" and os.environ.get(TF32_VARIABLE, "1") != "0"
    if kernels and int8:
        return ("batched replies match each prompt's alone, bit for bit (int8 activations through mlxchat's kernels), "
                "and differ from the float32 model's (int8_activations = true)")
    if kernels:
        return (f"batched replies match each prompt's alone, bit for bit ({dtype} through mlxchat's kernels, "
                "float32 sums)")
    if dtype == "float32" and not tf32:
        library = "the BLAS" if kind == "cpu" else "MLX's GPU matmul"
        return ("batched replies match each prompt's alone (float32, full precision), though not bit for bit: "
                f"{library} picks its kernel by the number of rows, and a row's logits move in their last digits")
    why = "TF32 matmuls (exact = false)" if dtype == "float32" else f"{dtype} on {'the CPU' if kind == 'cpu' else 'a GPU'}"
    return f"batched replies can differ from each prompt's alone: {why} round differently by batch size"


def device_kind() -> str:
    """The kind of MLX's default device: "cpu", "metal" or "cuda"."""
    # Imported here so that engine.cpu.blas can load its BLAS before the first `import mlx.core`.
    import mlx.core as mx

    if mx.default_device().type == mx.DeviceType.cpu:
        return "cpu"
    return "metal" if mx.metal.is_available() else "cuda"


def device_name() -> str:
    """A human name for MLX's default device, e.g. "Apple M2 Pro" or "AMD EPYC"."""
    import mlx.core as mx

    return str(mx.device_info().get("device_name") or device_kind())


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model string ("AMD EPYC 7B13"), from /proc/cpuinfo where there is one."""
    for line in _cpuinfo(cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    return platform.processor() or platform.machine()


def vector_extensions(cpuinfo: str | None = None) -> list[str]:
    """The vector extensions among VECTOR_FLAGS that the CPU reports (x86 Linux; else empty)."""
    for line in _cpuinfo(cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags = set(value.split())
            return [f for f in VECTOR_FLAGS if f in flags]
    return []


def cpu_summary() -> str:
    """The CPU in one phrase: model, cores and vector extensions ("AMD EPYC, 2 cores, avx2 fma")."""
    extensions = " ".join(vector_extensions())
    return f"{cpu_model()}, {os.cpu_count()} cores" + (f", {extensions}" if extensions else "")


def _cpuinfo(text: str | None) -> str:
    if text is not None:
        return text
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def release_thread_streams() -> None:
    """Releases the MLX streams the calling thread made, as MLX asks of every thread that used it
    before the thread ends: else the process can abort at exit ("terminate called without an active
    exception"). Nothing when MLX was never imported."""
    if "mlx.core" in sys.modules:
        import mlx.core as mx

        mx.clear_streams()


def on_own_thread(work: Callable[[], T], name: str) -> Future[T]:
    """Runs `work` (loading a model, starting an engine) on a new thread, whose MLX streams are released when it
    ends; the future gives what it returned or raised. A thread of its own, not a pooled one: MLX gives each thread
    its streams, and a pooled thread may be one that released them already."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # (the caller reads it from the future)
            future.set_exception(exc)
        finally:
            release_thread_streams()

    threading.Thread(target=run, name=name, daemon=True).start()
    return future

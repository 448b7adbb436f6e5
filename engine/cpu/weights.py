"""How weights are held on the CPU when the user leaves it to mlxchat (weights_dtype = "auto")."""

from __future__ import annotations

from typing import Any

from mlxchat.engine.devices import device_kind

# Quantized and half-precision layers stay as stored, multiplied by the compiled kernel; the rest is float32.
STORED = "stored"


def auto_weights_dtype(model: Any) -> str | None:
    """What "auto" does with `model`'s weights on this device: STORED, a float dtype to convert them all
    to, or None to keep the model as it is.

    On a CPU, a quantized model keeps its 4- and 8-bit layers where the compiled kernels run and
    support them all (they gain from batching and read a sixth of float32's bytes), and a float16 or
    bfloat16 model its layers (half float32's bytes); otherwise the weights become float32, whose BLAS
    matmuls gain from batching where MLX's quantized and half-precision ones do not. Metal and CUDA
    keep the model as it is.
    """
    if device_kind() != "cpu":
        return None
    import mlx.nn as nn

    from mlxchat.engine.cpu import kernels, stored

    if not kernels.status().active:
        return "float32"
    modules = [m for _, m in model.named_modules()]
    quantized = [m for m in modules if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))]
    if quantized:
        return STORED if all(stored.supported(m) for m in quantized) else "float32"
    return STORED if any(type(m) is nn.Linear and stored.supported_half(m) for m in modules) else "float32"

"""How weights are held on the CPU when the user leaves it to mlxchat (weights_dtype = "auto")."""

from __future__ import annotations

from typing import Any

from mlxchat.engine.devices import device_kind

# Quantized layers stay as stored, multiplied by the compiled kernel; everything else is float32.
STORED = "stored"


def auto_weights_dtype(model: Any) -> str | None:
    """What "auto" does with `model`'s weights on this device: STORED, a float dtype to convert them all
    to, or None to keep the model as it is.

    On a CPU, a quantized model keeps its 4- and 8-bit layers where the compiled kernels run and
    support them all (they gain from batching and read a sixth of float32's bytes); otherwise the
    weights become float32, whose BLAS matmuls gain from batching where MLX's quantized ones do not.
    Metal and CUDA keep the model as it is.
    """
    if device_kind() != "cpu":
        return None
    import mlx.nn as nn

    from mlxchat.engine.cpu import kernels, stored

    quantized = any(isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)) for _, m in model.named_modules())
    if quantized and kernels.status().active and not stored.unsupported(model):
        return STORED
    return "float32"

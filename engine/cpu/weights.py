"""How weights are held on the CPU when the user leaves it to mlxchat (weights_dtype = "auto")."""

from __future__ import annotations

from mlxchat.engine.devices import device_kind


def auto_weights_dtype() -> str | None:
    """The dtype "auto" converts the weights to on this device, or None to keep them as stored.

    MLX's CPU quantized and half-precision matmuls do not gain from batching; float32 with a real
    BLAS does. Metal and CUDA keep the model as it is.
    """
    return "float32" if device_kind() == "cpu" else None

"""Which MLX device runs the model: decides defaults (e.g. dequantize on CPU) and what `doctor` shows."""

from __future__ import annotations


def device_kind() -> str:
    """The kind of MLX's default device: "cpu", "metal" or "cuda"."""
    # Imported here so that engine.blas can load its BLAS before the first `import mlx.core`.
    import mlx.core as mx

    if mx.default_device().type == mx.DeviceType.cpu:
        return "cpu"
    return "metal" if mx.metal.is_available() else "cuda"


def device_name() -> str:
    """A human name for MLX's default device, e.g. "Apple M2 Pro" or "AMD EPYC"."""
    import mlx.core as mx

    return str(mx.device_info().get("device_name") or device_kind())

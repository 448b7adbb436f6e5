"""How the slots store K/V (the `kv_dtype` setting): as the model computes them, a narrower float, or 8 bits.

A stored buffer (StoredKV) is one array for a float type; for "q8", MLX's affine 8-bit format (mx.quantize:
values packed four to a uint32, then a scale and a bias per group of dims), the one mlx-lm's
QuantizedKVCache and `quantized_matmul` read on a GPU and the compiled attention kernel reads on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import mlx.core as mx

# What the setting accepts; "auto" is resolved per device by `resolve`.
KV_DTYPES = ("auto", "float32", "float16", "bfloat16", "q8")
STORABLE = ("float32", "float16", "bfloat16", "q8")  # every type the slots can store K/V in
BITS = 8  # q8
Q8_GROUPS = (64, 32)  # the widest group that divides the head size (mlx-lm's QuantizedKVCache uses 64)


@dataclass(frozen=True)
class KVType:
    """One way of storing K/V; `name` None keeps what the model computes, unconverted (mlx-lm's own caches)."""

    name: str | None = None

    @property
    def quantized(self) -> bool:
        return self.name == "q8"

    def encode(self, x: mx.array) -> StoredKV:
        """New K or V (..., tokens, dim) in the stored form."""
        if self.quantized:
            return StoredKV(tuple(mx.quantize(x, group_size=q8_group(x.shape[-1]), bits=BITS)))
        stored = x.dtype if self.name is None else getattr(mx, self.name)
        return StoredKV((x if x.dtype == stored else x.astype(stored),))

    def decode(self, stored: StoredKV, dtype: mx.Dtype) -> mx.array:
        """Stored K or V widened back to `dtype`, for attention code that reads plain arrays."""
        if self.quantized:
            w, scales, biases = stored.parts
            return mx.dequantize(w, scales, biases, group_size=q8_group(w.shape[-1] * 4), bits=BITS).astype(dtype)
        x = stored.parts[0]
        return x if x.dtype == dtype else x.astype(dtype)


class UnsupportedKV(ValueError):
    """The model's K/V cannot be stored in the asked type; the message says what to change."""


def q8_group(dim: int) -> int:
    """The group q8 stores `dim` values in, or UnsupportedKV."""
    group = next((g for g in Q8_GROUPS if dim % g == 0), None)
    if group is None:
        raise UnsupportedKV(f'kv_dtype = "q8" stores K/V in groups of {Q8_GROUPS[-1]} or {Q8_GROUPS[0]} values, and '
                            f"this model's attention heads have {dim}: use float16 or bfloat16")
    return group


class StoredKV:
    """K or V as stored: one array for a float type, or 8-bit values with their scales and biases, indexed as
    one array along the first three axes (slots, heads, tokens), where all its parts agree."""

    def __init__(self, parts: tuple[mx.array, ...]) -> None:
        self.parts = parts

    def __getitem__(self, index: Any) -> StoredKV:
        return StoredKV(tuple(p[index] for p in self.parts))

    def __setitem__(self, index: Any, new: StoredKV) -> None:
        for p, n in zip(self.parts, new.parts):
            p[index] = n

    @property
    def shape(self) -> tuple[int, int, int]:
        """(slots, heads, tokens)."""
        return self.parts[0].shape[:3]  # type: ignore[return-value]

    def map(self, fn: Callable[[mx.array], mx.array]) -> StoredKV:
        return StoredKV(tuple(fn(p) for p in self.parts))

    def scatter(self, flat_index: mx.array, new: StoredKV) -> StoredKV:
        """A copy with the (slot, head, token) rows at `flat_index` replaced by `new`'s rows."""
        out = []
        for p, n in zip(self.parts, new.parts):
            flat = p.reshape(-1, p.shape[-1])
            flat[flat_index] = n
            out.append(flat.reshape(p.shape))
        return StoredKV(tuple(out))


def resolve(setting: str, kernels_run: bool) -> KVType:
    """The type `setting` stands for on this device: "auto" is float16 where the compiled attention kernel
    reads it (a CPU: half the memory of float32, greedy replies unchanged on the default model), else
    the model's own dtype (Metal, CUDA: mlx-lm's KV as it computes it)."""
    if setting not in KV_DTYPES:
        raise ValueError(f"kv_dtype '{setting}' is not one of: {', '.join(KV_DTYPES)}")
    if setting == "auto":
        return KVType("float16") if kernels_run else KVType()
    return KVType(setting)

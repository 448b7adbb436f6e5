"""The sampler's top-k on MLX's CPU backend: the compiled kernel (kernels/top_k.cpp), where it runs."""

from __future__ import annotations

import mlx.core as mx

from mlxchat.engine.cpu import kernels


def kernel_top_k(logits: mx.array, k: int) -> tuple[mx.array, mx.array] | None:
    """Each row's k largest logits (R, vocab) -> (values, token ids), largest first, by the compiled kernel
    (0.06 ms a row of 49,152, against 0.56 for MLX's argpartition); None where it cannot run (not built,
    not float32, not on the CPU), for the caller to use MLX's own operations."""
    ext = kernels.status().module
    if ext is None or mx.default_device().type != mx.cpu or logits.dtype != mx.float32:
        return None
    values, ids = ext.top_k(logits, k, kernels.THREADS if logits.shape[0] > 1 else 1)
    return values, ids

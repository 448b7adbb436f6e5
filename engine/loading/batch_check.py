"""Checks, when a model loads, that its layers give in the engine's slots what they give alone.

Two slots run a prefill pass of rows of different lengths (the shorter right-padded), a decode
pass, and a chunk pass with rows at different offsets (it reads what the decode pass stored);
every row's logits are compared with mlx-lm running that row's tokens alone, through its own
cache. A model whose recurrent layers fold the padding into their state (they ignore the cache's
`lengths`) passes with rows of one width only: the engine then never pads them. A model that still differs, or whose layers reach into their caches in ways
slots cannot serve, is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from mlxchat.engine.kv import attention
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.loading.families import UnsupportedFamily, layer_kinds, model_type
from mlxchat.engine.loading.lazy import STREAM_HELP, is_stream_error, materialize

# Two rows of token ids every vocabulary has: prompts of 3 and 6 tokens, one token each in a
# decode pass, then chunks of 2 and 3 tokens (rows at different offsets). Each pass reads what the
# one before stored. (On SmolLM2 on a 2-core CPU the whole check takes about 0.7 s.)
_PROMPTS = ([5, 9, 3], [7, 1, 2, 6, 4, 3])
_STEPS = (([4], [2]), ([3, 5], [2, 6, 1]))
# float32 logits agree to rounding; half-precision or quantized ones round differently by batch size.
TIGHT, LOOSE = 1e-3, 5e-2


@dataclass(frozen=True)
class BatchCheck:
    """How the engine may batch this model's prefill."""

    padded_prefill: bool  # rows of different lengths may share a pass (right-padded)
    difference: float  # the largest logit difference from mlx-lm alone, relative to the logits' size


@dataclass(frozen=True)
class SlotReady:
    """A model and its tokenizer that `ready_for_slots` checked: what the engine's scheduler takes, trusting it."""

    model: Any
    tokenizer: Any
    batching: BatchCheck

    @property
    def padded_prefill(self) -> bool:
        return self.batching.padded_prefill


def ready_for_slots(model: Any, tokenizer: Any) -> SlotReady:
    """Checks a model for the slots, on the thread that built it (load_model does; UnsupportedFamily, or ValueError
    saying why, where slots cannot run it): its layer kinds, the batch check, every array it holds evaluated."""
    try:
        layer_kinds(model)
        batching = check_batching(model)
        materialize(model)
    except (RuntimeError, UnsupportedFamily) as exc:
        # (a graph built on another thread fails the batch check's forward pass, or the evaluation)
        if is_stream_error(exc) or is_stream_error(exc.__cause__):
            raise ValueError(STREAM_HELP) from exc
        raise
    return SlotReady(model, tokenizer, batching)


def check_batching(model: Any) -> BatchCheck:
    """Runs the check on the calling thread; raises UnsupportedFamily with the reason when slots cannot serve it."""
    from mlxchat.engine.cpu import stored

    with stored.float_rows(model):
        return _check(model)


def _check(model: Any) -> BatchCheck:
    try:
        wanted = _alone(model)
    except Exception as exc:
        raise UnsupportedFamily(
            f"model type '{model_type(model)}' cannot run on this device: mlx-lm's own forward pass fails "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    tolerance = TIGHT if wanted[0].dtype == mx.float32 else LOOSE
    dispatch = attention.install(model)
    try:
        padded = _difference(_in_slots(model, dispatch, padded=True), wanted)
        if padded <= tolerance:
            return BatchCheck(True, padded)
        unpadded = _difference(_in_slots(model, dispatch, padded=False), wanted)
    except Exception as exc:
        raise UnsupportedFamily(
            f"model type '{model_type(model)}' is not supported by mlxchat's engine: its layers use their cache "
            f"in a way the slots cannot serve ({type(exc).__name__}: {exc})"
        ) from exc
    if unpadded <= tolerance:
        return BatchCheck(False, unpadded)
    raise UnsupportedFamily(
        f"model type '{model_type(model)}' is not supported by mlxchat's engine: in slots its output differs "
        f"from the model alone (logits off by {unpadded:.3g} of their size), so its replies would be wrong"
    )


def _alone(model: Any) -> list[mx.array]:
    """Each row's last logits after its prompt and after each step, mlx-lm running the row alone."""
    from mlx_lm.models.cache import make_prompt_cache

    out = []
    for row, prompt in enumerate(_PROMPTS):
        cache = make_prompt_cache(model)
        for tokens in (prompt, *(step[row] for step in _STEPS)):
            out.append(model(mx.array([tokens]), cache=cache)[0, -1])
            mx.eval(out[-1])
    return out


def _in_slots(model: Any, dispatch: bool, padded: bool) -> list[mx.array]:
    """The same logits from two slots of the engine's store, rows sharing passes (right-padded if `padded`)."""
    store = SlotKVStore.for_model(model, len(_PROMPTS), 32, dispatch)
    rows = list(range(len(_PROMPTS)))
    got: list[list[mx.array]] = [[] for _ in rows]
    for step in (_PROMPTS, *_STEPS):
        chunks = [list(c) for c in step]
        groups = [rows] if padded or len({len(c) for c in chunks}) == 1 else [[r] for r in rows]
        for group in groups:
            width = max(len(chunks[r]) for r in group)
            counts = [len(chunks[r]) for r in group]
            inputs = mx.array([chunks[r] + chunks[r][-1:] * (width - len(chunks[r])) for r in group])
            logits = model(inputs, cache=store.batch(group, width, counts))
            store.commit(group, counts)
            for i, r in enumerate(group):
                got[r].append(logits[i, counts[i] - 1])
        mx.eval([a for row in got for a in row], store.arrays)
    return [a for row in got for a in row]


def _difference(got: list[mx.array], wanted: list[mx.array]) -> float:
    """The largest difference between two lists of logits, relative to the size of the wanted ones."""
    worst = 0.0
    for g, w in zip(got, wanted):
        scale = 1.0 + mx.abs(w.astype(mx.float32)).max().item()
        worst = max(worst, mx.abs(g.astype(mx.float32) - w.astype(mx.float32)).max().item() / scale)
    return worst

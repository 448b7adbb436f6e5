"""Which model families this build runs, how each layer kind is cached per slot, and the refusal for the rest."""

from __future__ import annotations

from typing import Any

from mlxchat.engine.kv.kinds import KIND_NOTES, UnsupportedCache, cache_kind
from mlxchat.engine.kv.slot_store import SlotKVStore

# Families checked token for token against mlx-lm alone, in tests/engine/test_families.py
# (window layers, recurrent state, MLA, MoE, scaled RoPE). Other mlx-lm families whose
# layers are all of the kinds above load too; a family with any other cache kind is refused.
TESTED_FAMILIES = (
    "llama",
    "qwen3",
    "phi3",
    "gemma2",
    "gemma3_text",
    "gemma4_text",
    "cohere2",
    "gpt_oss",
    "deepseek_v3",
    "mixtral",
    "qwen3_next",
    "lfm2",
    "falcon_h1",
    "mamba2",
)


# Families whose layers are all of kinds the slots hold, but that the engine cannot run exactly:
# refused at load with the reason (tests/engine/test_family_matrix.py checks each is refused).
REFUSED: dict[str, str] = {
    # Its window layers' mask spans window + 1 tokens while mlx-lm's ring holds the window: what a
    # slot's ring gives differs from mlx-lm alone once a chat is past the window.
    "plamo3": "its sliding-window layers attend over one token more than their cache's window holds",
}


class UnsupportedFamily(Exception):
    """The engine cannot run this model; the message names its type and what is missing."""


def model_type(model: Any) -> str:
    args = getattr(model, "args", None)
    return getattr(args, "model_type", None) or type(model).__module__.rsplit(".", 1)[-1]


def layer_kinds(model: Any) -> list[str]:
    """The mlx-lm cache class of each layer (what `model.make_cache()` gives); raises UnsupportedFamily."""
    if model_type(model) in REFUSED:
        raise UnsupportedFamily(
            f"model type '{model_type(model)}' is not supported by mlxchat's engine: {REFUSED[model_type(model)]}"
        )
    try:
        cache = model.make_cache() if hasattr(model, "make_cache") else None
    except Exception as exc:  # a model that cannot even say what it caches cannot be run here
        raise UnsupportedFamily(f"model type '{model_type(model)}': its make_cache() failed ({exc})") from exc
    if cache is None:
        return ["KVCache"] * len(model.layers)
    kinds = []
    for i, proto in enumerate(cache):
        try:
            kinds.append(cache_kind(proto))
        except UnsupportedCache as exc:
            raise UnsupportedFamily(
                f"model type '{model_type(model)}' is not supported by mlxchat's engine: layer {i}: {exc}. "
                f"It supports these layer kinds: {', '.join(KIND_NOTES)}."
            ) from exc
    return kinds


def slot_store(model: Any, n_slots: int, capacity: int, per_slot_dispatch: bool) -> SlotKVStore:
    """The slot caches `model` needs: per layer the kind its own cache has, with masks it can use.

    Array masks, exact over the rows' padded K/V, where per-slot attention cannot serve every
    layer: the slot dispatcher is not installed (the model does its own attention), or later
    layers attend over earlier layers' K/V with the model's mask (Gemma 4's shared K/V:
    make_cache() has fewer entries than layers).
    """
    cache = model.make_cache() if hasattr(model, "make_cache") else None
    layers = cache if cache is not None else len(model.layers)
    shares_kv = cache is not None and len(cache) < len(model.layers)
    return SlotKVStore(
        n_slots, capacity, layers, array_masks=shares_kv or not per_slot_dispatch, mask_rank=_mask_rank(model)
    )


def _mask_rank(model: Any) -> int:
    """The rank of the array masks the model's attention broadcasts against.

    Gemma 2 computes its own scores as (batch, kv heads, repeats, L, keys) when heads are grouped,
    so a per-row mask needs one more axis there than the usual (batch, heads, L, keys).
    """
    if model_type(model) == "gemma2":
        args = model.args
        return 5 if args.num_attention_heads != args.num_key_value_heads else 4
    return 4


def describe() -> list[str]:
    """Lines for `mlxchat models`: each layer kind and how a slot holds it, then the tested families."""
    lines = ["Layer kinds (mlx-lm cache classes) and how each slot holds them:"]
    lines += [f"  {name:<16} {note}" for name, note in KIND_NOTES.items()]
    lines.append("Families checked token for token against mlx-lm alone: " + ", ".join(TESTED_FAMILIES) + ".")
    lines.append(
        "Any other mlx-lm family whose layers are all of these kinds runs too, once a check at load has "
        "found its batched output equal to the model alone; one that differs, or asks for another kind, "
        "is refused when it loads, naming what is missing."
    )
    return lines

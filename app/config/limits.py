"""What a setting can ever hold, and which settings must come in order: checked before anything starts."""

from __future__ import annotations

from collections.abc import Mapping

# No model is trained on a longer context (the longest today, Llama 4 Scout, on 10M tokens), and
# its KV cache would not fit in any machine's memory: a larger value is a typo.
CONTEXT_CEILING = 1 << 24
# Far more chats generating at once than any machine serves; the design's default limit is 8.
SLOT_CEILING = 1024
# No tokenizer has a larger vocabulary, so a larger top_k means the same as 0 (off).
VOCAB_CEILING = 1 << 24
# MLX random keys are made from an unsigned 64-bit seed.
SEED_CEILING = (1 << 64) - 1

# Pairs of settings (smaller, larger) that contradict each other when the first exceeds the second.
ORDERED_PAIRS: tuple[tuple[str, str], ...] = (
    ("per_slot_min", "per_slot_floor"),
    ("per_slot_min", "ctx_per_slot"),
    ("per_slot_min", "ctx_size"),
    ("ctx_per_slot", "ctx_size"),
)


def out_of_order(values: Mapping[str, int | None]) -> list[tuple[str, str]]:
    """The ORDERED_PAIRS whose values are both given (not None) and in the wrong order."""
    pairs = []
    for low, high in ORDERED_PAIRS:
        small, large = values.get(low), values.get(high)
        if small is not None and large is not None and small > large:
            pairs.append((low, high))
    return pairs


def model_limits(values: Mapping[str, int | None], trained_ctx: int | None) -> list[tuple[str, str]]:
    """(key, problem) for each size the loaded model can never use, whatever the number of slots.

    A per-slot size above the trained context, or a total above parallel_max slots of it: the
    engine would cap the slots and the total would not be what the user asked for.
    """
    if not trained_ctx:
        return []
    problems = []
    per_slot = values.get("ctx_per_slot")
    if per_slot is not None and per_slot > trained_ctx:
        problems.append(
            ("ctx_per_slot", f"the model was trained on {trained_ctx} tokens; set it to at most {trained_ctx}")
        )
    total, slots = values.get("ctx_size"), values.get("parallel_max") or 1
    if total is not None and total > slots * trained_ctx:
        problems.append((
            "ctx_size",
            f"{slots} slots (parallel_max) of the {trained_ctx} tokens it was trained on hold "
            f"{slots * trained_ctx}; set it to at most {slots * trained_ctx}",
        ))
    return problems

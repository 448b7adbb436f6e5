"""Which prompts a prefill pass reads, and how many tokens of each: the scheduler's prefill policy."""

from __future__ import annotations

from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.slots import Slot

# Most prompt tokens in one prefill pass (all rows together): bounds how long decoding slots
# wait for a new prompt, while letting prompts that arrive together share a pass.
PREFILL_BUDGET = 512


def chunk_width(slots: list[Slot], chunk: int) -> int:
    """Tokens per row of a prefill pass over `slots`: the longest pending prompt, up to a chunk."""
    return min(chunk, max(len(s.request.pending) for s in slots))  # type: ignore[union-attr]


def pick_prefill(order: list[Slot], store: SlotKVStore, chunk: int, padded: bool) -> list[Slot]:
    """The slots (in `order`, whose turn it is first) whose next chunks one pass reads, within PREFILL_BUDGET.

    With `padded` False (a model whose states would take in the padding) only rows of one width share a pass.
    """
    width = chunk_width(order, chunk)
    if not padded:
        order = [s for s in order if chunk_width([s], chunk) == width]
    fits = [s for s in order if store.lengths[s.id] + width <= store.capacity]
    return (fits or order[:1])[: max(1, PREFILL_BUDGET // width)]

"""Which prompts a prefill pass reads, and how many tokens of each: the scheduler's prefill policy.

While other slots stream, the chunk comes from engine.prefill.pacing (measured step costs); with nothing
streaming, a pass reads up to the device's budget at once.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.sampling import sample_rows
from mlxchat.engine.slots import Slot

# Most prompt tokens in one pass (all rows together) when no slot is streaming. On a CPU a pass's
# rate rises up to about this size and falls beyond (SmolLM2 Q4_1 through the compiled matmul, 2 cores
# of an AMD EPYC: 362 tok/s in 64-token passes, 431 in 256, 470-480 in 512-1024, 386 in 2048; float32
# through the BLAS: 278, 350, 342-421, 337), and a burst of 8 chats' 130-token prompts is read in one
# pass instead of three prompts first and the rest paced beside their streams. A GPU reads the weights
# once for many more tokens before it is compute-bound: not measured here (no GPU).
PREFILL_BUDGET = 1024
GPU_BUDGET = 4096


def prefill_budget() -> int:
    """Most prompt tokens in one pass on MLX's default device."""
    return GPU_BUDGET if mx.default_device().type == mx.gpu else PREFILL_BUDGET


def burst(slots: list[Slot], budget: int) -> bool:
    """Whether the prompts being read came together and are read before any reply goes on: no reply has gone past
    its first token, and what is left of the prompts fits two passes. Sixteen chats' 130-token prompts sent at once
    were read in one pass of seven, then the nine others in small chunks beside seven streams: the last first token
    came 8.7 s after they were sent (2 cores of an Intel Xeon), against 3.8 s read in two passes."""
    requests = [s.request for s in slots if s.request is not None]
    if any(not r.pending and r.generated > 1 for r in requests):
        return False
    return 0 < sum(len(r.pending) for r in requests if r.pending) <= 2 * budget


def chunk_width(slots: list[Slot], chunk: int) -> int:
    """Tokens per row of a prefill pass over `slots`: the longest pending prompt, up to a chunk."""
    return min(chunk, max(len(s.request.pending) for s in slots))  # type: ignore[union-attr]


def pick_prefill(order: list[Slot], store: SlotKVStore, chunk: int, padded: bool, budget: int) -> list[Slot]:
    """The slots (in `order`, whose turn it is first) whose next chunks one pass reads, within `budget` tokens.

    With `padded` False (a model whose states would take in the padding) only rows of one width share a pass.
    """
    width = chunk_width(order, chunk)
    if not padded:
        order = [s for s in order if chunk_width([s], chunk) == width]
    fits = [s for s in order if store.lengths[s.id] + width <= store.capacity]
    picked = (fits or order[:1])[: max(1, budget // width)]
    # A chunk that reaches an image is read as embeddings, in a pass of its own.
    return next(([s] for s in picked if reads_image(s, chunk)), picked) if len(picked) > 1 else picked


def reads_image(slot: Slot, chunk: int) -> bool:
    """Whether the slot's next prompt chunk (up to `chunk` tokens) reaches an image's positions."""
    r = slot.request
    if r is None or r.images is None:
        return False
    start = len(r.prompt) - len(r.pending)
    return r.images.touches_images(start, start + min(chunk, len(r.pending)))


def towers_waiting(prefilling: list[Slot], chunk: int) -> list[Slot]:
    """The prompts whose next chunk reaches images their vision tower has not read yet."""
    return [s for s in prefilling if reads_image(s, chunk) and s.request.images.tower_pending]  # type: ignore[union-attr]


class PromptChunks:
    """The next chunk (up to `chunk` tokens) of each slot's prompt, as one pass's rows, right-padded."""

    def __init__(self, slots: list[Slot], chunk: int, store: SlotKVStore) -> None:
        pending = [s.request.pending for s in slots]  # type: ignore[union-attr]
        width = chunk_width(slots, chunk)
        if len(slots) == 1:
            width = min(width, store.capacity - store.lengths[slots[0].id])
        self.slots = slots
        self.rows = [s.id for s in slots]
        self.chunks = [p[:width] for p in pending]
        self.inputs = mx.array([c + c[-1:] * (width - len(c)) for c in self.chunks])
        self.caches = store.batch(self.rows, width, [len(c) for c in self.chunks])
        # A chunk that reaches an image (always alone in its pass): its embeddings, the vision tower's among them, and a
        # family's own inputs of those positions (engine.prefill.images.ImagePrompt.inputs_of).
        self.embeds: dict[str, Any] | None = None
        if len(slots) == 1 and reads_image(slots[0], width):
            images, start = slots[0].request.images, slots[0].request.prompt_processed  # type: ignore[union-attr]
            self.inputs = mx.array([images.ids[start : start + width]])
            self.embeds = images.inputs_of(start, start + width)
        self.ending = [len(c) == len(p) for c, p in zip(self.chunks, pending)]
        # Where each row's logits are read when some prompt ends in this chunk (its last real token).
        self.positions = mx.array([len(c) - 1 for c in self.chunks]) if any(self.ending) else None

    def sample(self, logits: mx.array) -> mx.array:
        """The first reply token of each prompt that ends here, from the rows' logits; only those rows'
        samplers draw (a seeded sampler must not move for a prompt still being read)."""
        ends = [i for i, end in enumerate(self.ending) if end]
        samplers = [self.slots[i].request.sampler for i in ends]  # type: ignore[union-attr]
        return sample_rows(logits[mx.array(ends)], samplers)

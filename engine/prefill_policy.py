"""Which prompts a prefill pass reads, and how many tokens of each: the scheduler's prefill policy.

While other slots stream, a long prompt must not freeze them: a pass that reads prompt tokens
is sized from measured costs (StepCosts) so that the streams' step takes at most STALL times
their usual step. With nothing streaming, a pass reads up to the device's budget at once.
"""

from __future__ import annotations

import mlx.core as mx

from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.sampling import sample_rows
from mlxchat.engine.slots import Slot

# Most prompt tokens in one pass (all rows together) when no slot is streaming. On a CPU a pass is
# compute-bound well below this (SmolLM2 float32, 2 cores of an AMD EPYC: 327 tok/s in 64-token
# passes, 360 in 128, 298 in 256), so larger passes only delay the next decode step. A GPU reads
# the weights once for many more tokens before it is compute-bound: not measured here (no GPU).
PREFILL_BUDGET = 512
GPU_BUDGET = 4096
# While slots stream: their step may take this many times its usual time when a prompt is read with it.
STALL = 1.8
# Fewest prompt tokens a pass reads while slots stream (fewer would make the prompt wait for ever),
# and how many before the costs are measured.
MIN_CHUNK = 8
FIRST_CHUNK = 32
# Weight of the newest measure in the running average of a decode step.
NEWEST = 0.3
# Most a chunk may grow or shrink from one pass to the next.
STEP_RATIO = 2.0


class StepCosts:
    """What the scheduler's steps cost, and the prompt chunk that keeps streaming slots at their pace.

    A pass's cost is far from proportional to its tokens (a pass of 1 token and one of 16 cost about
    the same on a CPU: the weights are read either way) and a prompt token costs more the further
    in it sits, so the chunk is steered by what the last one cost, not predicted from a rate.
    """

    def __init__(self) -> None:
        self.decode_s: float | None = None
        self.streaming_chunk = FIRST_CHUNK

    def record(self, seconds: float, prompt_tokens: int, decode_rows: int) -> None:
        """One step took `seconds`, reading `prompt_tokens` prompt tokens and decoding `decode_rows` slots."""
        if not decode_rows:
            return
        if prompt_tokens == 0:
            self.decode_s = seconds if self.decode_s is None else (1 - NEWEST) * self.decode_s + NEWEST * seconds
        elif self.decode_s is not None:
            # The prompt's share of the step against what STALL allows it.
            ratio = (STALL - 1.0) * self.decode_s / max(seconds - self.decode_s, 1e-6)
            ratio = min(STEP_RATIO, max(1 / STEP_RATIO, ratio))
            self.streaming_chunk = max(MIN_CHUNK, round(prompt_tokens * ratio))

    def chunk(self, most: int) -> int:
        """Prompt tokens a pass may read while slots stream, so that their step stays within STALL."""
        return min(most, self.streaming_chunk)


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
    return (fits or order[:1])[: max(1, budget // width)]


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
        self.ending = [len(c) == len(p) for c, p in zip(self.chunks, pending)]
        # Where each row's logits are read when some prompt ends in this chunk (its last real token).
        self.positions = mx.array([len(c) - 1 for c in self.chunks]) if any(self.ending) else None

    def sample(self, logits: mx.array) -> mx.array:
        """The first reply token of each prompt that ends here, from the rows' logits; only those rows'
        samplers draw (a seeded sampler must not move for a prompt still being read)."""
        ends = [i for i, end in enumerate(self.ending) if end]
        samplers = [self.slots[i].request.sampler for i in ends]  # type: ignore[union-attr]
        return sample_rows(logits[mx.array(ends)], samplers)

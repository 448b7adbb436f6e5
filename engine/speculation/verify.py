"""The pass that checks drafts: every decoding slot's rows in one forward pass, a drafting slot's as a short chunk
(its last token and its draft), the others' as decode rows; each row's token drawn as the plain step would draw
it there, the drafts kept as far as they equal those draws, the rest of their K/V dropped.

Exact where the pass is batch-invariant (the compiled kernels): a chunk's rows give the bits single steps would
(its queries attend one by one as decode rows do: engine.kv.layout.PassLayout.per_token), and a seeded row draws
with the key of its position in the reply (engine.sampling.SlotSampler.ahead), so a reply with drafts is the
reply without them, token for token.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import mlx.core as mx

from mlxchat.engine.forward import Forward
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.rate import PassMeter
from mlxchat.engine.reply_stream import ReplyStream
from mlxchat.engine.sampling import SlotSampler, sample_rows
from mlxchat.engine.slots import Request, Slot
from mlxchat.engine.speculation.acceptance import KEEP, ROW_COST, DraftState, accepted, worth
from mlxchat.engine.speculation.drafter import Drafter
from mlxchat.engine.speculation.notes import draft_note


def drafts_for(r: Request, drafter: Drafter | None) -> bool:
    """Whether this reply drafts: it asked to (for "draft", a draft model is loaded), and no tokens are forced on it
    (a reasoning budget may force some)."""
    way = r.sampling.speculative
    return (way == "lookup" or way == "draft" and drafter is not None) and r.split.budget is None and not r.forced


class Verifier:
    """Drafts for the slots whose replies ask for them and checks them, in the scheduler's pass."""

    def __init__(self, forward: Forward, replies: ReplyStream, store: Callable[[], SlotKVStore], rate: PassMeter,
                 drafter: Drafter | None = None) -> None:
        self.forward = forward
        self.drafter = drafter
        self.replies = replies
        self._store = store
        self.rate = rate
        self._drafting: dict[int, tuple[Request, DraftState]] = {}  # slot id -> its reply and that reply's drafting
        self.row_cost = ROW_COST  # what a row costs a pass, against its fixed part (engine.speculation.acceptance)
        # What a draft model's pass costs against that fixed part (None: measured, the passes of both timed).
        self.draft_cost: float | None = None
        self._fixed_s: float | None = None  # the fixed part of a checking pass, in seconds, as measured

    @property
    def store(self) -> SlotKVStore:
        return self._store()

    def wanted(self, slots: list[Slot]) -> bool:
        """Whether some decoding reply has a draft to check now: only then does the step wait for the pass in
        flight and check, else decode passes stay pipelined (a reply that does not repeat costs nothing)."""
        if not self.store.rolls_back:
            return False
        decoding = [s for s in slots if s.request is not None and not s.request.pending]
        for s in decoding:
            r = s.request
            assert r is not None
            if not r.cancelled and drafts_for(r, self.drafter):
                state = self._state(s, r)
                if state.length(self._least(r, len(decoding)), r.generated) and (
                        r.sampling.speculative == "draft" or state.expect(s.history, r.generated)):
                    return True
        return False

    def _least(self, r: Request, slots: int) -> float:
        """The least chance a drafted token of `r`'s must have to pay (engine.speculation.acceptance.worth)."""
        if r.sampling.speculative != "draft" or self.drafter is None:
            return worth(slots, self.row_cost)
        measured = self.drafter.pass_s / self._fixed_s if self.drafter.pass_s and self._fixed_s else self.drafter.cost
        return worth(slots, self.row_cost, measured if self.draft_cost is None else self.draft_cost)

    @property
    def pass_costs(self) -> tuple[float, float]:
        """Seconds of a draft model's pass and of the fixed part of a checking pass, as measured (0: not yet)."""
        return (self.drafter.pass_s or 0.0) if self.drafter else 0.0, self._fixed_s or 0.0

    @property
    def note(self) -> str:
        """Which draft model drafts, and how much of what it drafted was taken (F3)."""
        d = self.drafter
        return draft_note(d.name, d.drafted, d.accepted, d.bytes_allocated) if d else ""

    def check(self, slots: list[Slot]) -> int:
        """One pass over every decoding slot (each with its next input known); returns the slots decoded."""
        store = self.store
        decoding = [s for s in slots if s.request is not None and s.request.next_input is not None]
        plans: list[tuple[Slot, list[int]]] = []
        wants: list[tuple[int, int]] = []  # (plan, tokens) the draft model is to draft
        for s in decoding:
            r = s.request
            assert r is not None and r.next_input is not None
            s.history.append(r.next_input)
            r.next_input = None
            k = self._length(s, r, store, self._least(r, len(decoding)))
            by_model = k > 0 and r.sampling.speculative == "draft"
            if by_model:
                wants.append((len(plans), k))
            plans.append((s, self._state(s, r).draft(s.history, r.generated, k) if k and not by_model else []))
        if wants and self.drafter is not None:
            asked = [(plans[i][0].id, plans[i][0].history, k) for i, k in wants]
            for (i, _), d in zip(wants, self.drafter.propose(store, asked)):
                plans[i] = (plans[i][0], d)
        started = time.perf_counter()
        singles = [(s, d) for s, d in plans if not d]
        drafting = [(s, d) for s, d in plans if d]
        # Decode rows apart from the chunks where the forward can run two groups in one pass; else one padded group.
        groups = [singles, drafting] if self.forward.mixes and singles and drafting else [plans]
        batches = [self._rows(store, group) for group in groups]
        logits = self.forward.every_logits([(inputs, caches) for inputs, caches, _ in batches])
        picked = mx.concatenate([mx.take(lg.reshape(-1, lg.shape[-1]), mx.array(at), axis=0)
                                 for lg, (_, _, at) in zip(logits, batches)])
        order = [plan for group in groups for plan in group]
        draws = [r_ahead for s, d in order for r_ahead in s.request.sampler.ahead(len(d) + 1)]  # type: ignore[union-attr]
        tokens = sample_rows(picked, draws)
        mx.eval(tokens, store.arrays)
        fixed = (time.perf_counter() - started) / (1 + self.row_cost * sum(len(d) + 1 for _, d in plans))
        self._fixed_s = fixed if self._fixed_s is None else KEEP * self._fixed_s + (1 - KEEP) * fixed
        store.commit([s.id for s, _ in order], [len(d) + 1 for _, d in order])
        chosen, start, given = tokens.tolist(), 0, 0
        for s, d in order:
            targets = chosen[start : start + len(d) + 1]
            given += self._take(s, d, targets, draws[start : start + len(d) + 1])
            start += len(d) + 1
        self.rate.passed(len(order), given)
        return len(order)

    def _length(self, s: Slot, r: Request, store: SlotKVStore, least: float) -> int:
        """How many tokens the slot drafts in this pass: none where it does not draft (or pauses), else as many as
        are each likely enough to be taken (`least`) to pay for their rows, within its room (context, max_tokens)."""
        if r.cancelled or not drafts_for(r, self.drafter) or not store.rolls_back:
            return 0
        state = self._state(s, r)
        state.came(s.history[-1], r.generated)
        room = min(store.capacity - store.lengths[s.id] - 1, r.sampling.max_tokens - r.generated - 1)
        return min(room, state.length(least, r.generated))

    def _state(self, s: Slot, r: Request) -> DraftState:
        """The drafting of the reply `r` in slot `s` (a new reply in the slot starts afresh)."""
        held = self._drafting.get(s.id)
        if held is None or held[0] is not r:
            held = self._drafting[s.id] = (r, DraftState())
        return held[1]

    def _rows(self, store: SlotKVStore, plans: list[tuple[Slot, list[int]]]) -> tuple[mx.array, list[Any], list[int]]:
        """A group's inputs (right-padded), its caches, and where each real row lies in its flattened logits."""
        width = max(len(d) + 1 for _, d in plans)
        rows = [[s.history[-1]] + d for s, d in plans]
        inputs = mx.array([row + row[-1:] * (width - len(row)) for row in rows])
        caches = store.batch([s.id for s, _ in plans], width, [len(row) for row in rows], per_token=True)
        at = [i * width + j for i, row in enumerate(rows) for j in range(len(row))]
        return inputs, caches, at

    def _take(self, s: Slot, drafts: list[int], targets: list[int], draws: list[SlotSampler]) -> int:
        """Streams the slot's tokens that the check confirmed; drops the K/V of the rest. Returns tokens given."""
        r = s.request
        assert r is not None
        if r.cancelled:
            self.replies.finish(s, "cancelled")
            s.rollback(self.store, len(s.history))
            return 0
        n = accepted(drafts, targets)
        # The rejected drafts' K/V dropped: the slot holds what n + 1 single steps would have left.
        self.store.rollback(s.id, len(s.history) + n)
        r.sampler.skip(draws[n])
        if drafts:
            self._state(s, r).record(len(drafts), n, r.generated)
            r.drafted, r.accepted = r.drafted + len(drafts), r.accepted + n
            if r.sampling.speculative == "draft" and self.drafter is not None:
                self.drafter.checked(s.id, s.history + drafts[:n], len(drafts), n)
        given = 0
        for i, token in enumerate(targets[: n + 1]):
            given += 1
            if not self.replies.take(s, token, next_pass=i < n):
                break
        s.rollback(self.store, len(s.history))  # (a reply that ended on a confirmed token keeps no K/V past it)
        return given


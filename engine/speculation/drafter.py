"""A draft model: a smaller model with the target's vocabulary proposes each drafting slot's next tokens, greedily,
for the target to check in its batched pass (engine.speculation.verify): what it proposes only decides how many
tokens a pass gives, never which.

Its K/V is its own, divided among the same slots and sized as theirs. Before it drafts, it reads what a slot holds
and it has not read (a prompt, the tokens decoded without drafts, the target's last token) and gives back what it
drafted and the target did not take: it keeps, per slot, the tokens its K/V holds, and goes back to the longest
prefix they share with the slot's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.utils import common_prefix_len

from mlxchat.engine.forward import Forward
from mlxchat.engine.kv import attention as slot_attention
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.kv.kv_types import KVType
from mlxchat.engine.loading.batch_check import SlotReady

# Tokens a slot's first drafting pass reads beside the others' (right-padded, where the model allows it); a longer
# backlog (a prompt) is read first, alone, in chunks of CATCH_UP_CHUNK.
SHORT_BACKLOG = 8
CATCH_UP_CHUNK = 256
KEEP = 0.8  # how much of the measured pass time so far each new measure keeps


@dataclass(frozen=True)
class DraftModel:
    """A loaded draft model, as the scheduler is given it (engine.speculation.draft_load.load_draft)."""

    ready: SlotReady  # the model, checked for the slots at its load (LoadedModel.ready)
    name: str
    kv_type: KVType  # how its slots store K/V (LoadedModel.kv_type)
    vocab: int  # the tokens of the vocabulary it shares with the target (its head may have more rows: padding)
    # What one of its passes costs against one of the target's, until measured: its weights' share of the target's
    # (a decode pass reads every weight once).
    cost: float


class Drafter:
    """The draft model's slots: proposes up to k tokens for each drafting slot, one batched pass a token."""

    def __init__(self, draft: DraftModel) -> None:
        """Set up on the thread that loaded the model, as the scheduler is."""
        self.name = draft.name
        self.model = draft.ready.model
        self.padded = draft.ready.padded_prefill
        self.per_slot_dispatch = slot_attention.install(self.model)
        self.forward = Forward(self.model)
        self.kv_type = draft.kv_type
        self.store: SlotKVStore | None = None
        self._held: dict[int, list[int]] = {}  # slot id -> the tokens whose K/V its store holds
        self.pass_s: float | None = None  # seconds one drafting pass takes, measured (None: not yet)
        self.cost = draft.cost
        self.vocab = draft.vocab
        self.drafted = self.accepted = 0  # over every reply it drafted for, as the target checked them

    def propose(self, target: SlotKVStore, wants: list[tuple[int, list[int], int]]) -> list[list[int]]:
        """For each (slot id, the slot's tokens, k): up to k tokens the draft model takes to follow the tokens."""
        store = self._fit(target)
        backlogs = self._backlogs(store, wants)
        started = time.perf_counter()  # (a prompt read alone is not a drafting pass)
        rows = [slot for slot, _, _ in wants]
        width = max(len(b) for b in backlogs)
        inputs = mx.array([b + b[-1:] * (width - len(b)) for b in backlogs])
        caches = store.batch(rows, width, [len(b) for b in backlogs])
        positions = mx.array([len(b) - 1 for b in backlogs]) if width > 1 else None
        last = self._pick(self.forward.logits(inputs, caches, positions))
        store.commit(rows, [len(b) for b in backlogs])
        for slot, backlog in zip(rows, backlogs):
            self._held[slot].extend(backlog)
        drafts = [last]
        for depth in range(1, max(k for _, _, k in wants)):
            # The slots that draft this deep take their previous draft as input (the graph stays lazy until the end).
            at = [i for i, (_, _, k) in enumerate(wants) if k > depth]
            ids = [rows[i] for i in at]
            fed = mx.take(drafts[-1], mx.array(at))
            logits = self.forward.logits(fed[:, None], store.batch(ids, 1), None)
            store.commit(ids, [1] * len(ids))
            drafts.append(mx.zeros_like(last).at[mx.array(at)].add(self._pick(logits)))
        out = mx.stack(drafts, axis=1)
        mx.eval(out, store.arrays)
        self._measured((time.perf_counter() - started) / len(drafts))
        proposed = [row[:k] for row, (_, _, k) in zip(out.tolist(), wants)]
        for slot, d in zip(rows, proposed):
            self._held[slot].extend(d[:-1])  # (the last drafted token was not fed back)
        return proposed

    def _pick(self, logits: mx.array) -> mx.array:
        """Its most likely token of each row, among the tokens the target has."""
        return mx.argmax(logits[:, : self.vocab], axis=-1)

    def _backlogs(self, store: SlotKVStore, wants: list[tuple[int, list[int], int]]) -> list[list[int]]:
        """The tokens each slot's first drafting pass reads (the last always; a short backlog beside it, where the
        model's rows may be padded and the padding fits the slot); any longer backlog is read alone first."""
        limit = SHORT_BACKLOG if self.padded else 1
        for slot, tokens, _ in wants:
            self.rollback(slot, tokens[:-1])  # (the last token it reads itself, for its logits)
            if len(tokens) - len(self._held[slot]) > limit:
                self._catch_up(store, slot, tokens[:-1])
        width = max(len(tokens) - len(self._held[slot]) for slot, tokens, _ in wants)
        if any(len(self._held[slot]) + width > store.capacity for slot, _, _ in wants):
            for slot, tokens, _ in wants:
                self._catch_up(store, slot, tokens[:-1])
        return [tokens[len(self._held[slot]) :] for slot, tokens, _ in wants]

    def checked(self, slot: int, tokens: list[int], drafted: int, taken: int) -> None:
        """The target checked the slot's draft of `drafted` tokens and took `taken`: its K/V of the rest goes (the
        slot now holds `tokens`)."""
        self.drafted, self.accepted = self.drafted + drafted, self.accepted + taken
        self.rollback(slot, tokens)

    def rollback(self, slot: int, tokens: list[int]) -> None:
        """Keeps the slot's K/V of the longest prefix its tokens share with `tokens` (the slot's, as checked)."""
        held = self._held.setdefault(slot, [])
        keep = common_prefix_len(held, tokens)
        del held[keep:]
        if self.store is not None:
            self.store.rollback(slot, keep)

    def _catch_up(self, store: SlotKVStore, slot: int, tokens: list[int]) -> None:
        """Reads `tokens` past what the slot holds, alone, in chunks (their K/V only)."""
        held = self._held[slot]
        while len(held) < len(tokens):
            chunk = tokens[len(held) : len(held) + CATCH_UP_CHUNK]
            self.forward.states(mx.array([chunk]), store.batch([slot], len(chunk)))
            mx.eval(store.arrays)
            store.commit([slot], [len(chunk)])
            held.extend(chunk)

    def _fit(self, target: SlotKVStore) -> SlotKVStore:
        """Its store, as many slots as the target's and as long (a new plan starts it over, empty)."""
        if self.store is None or (self.store.n_slots, self.store.capacity) != (target.n_slots, target.capacity):
            self.store = SlotKVStore.for_model(self.model, target.n_slots, target.capacity, self.per_slot_dispatch,
                                               self.kv_type)
            self._held.clear()
        return self.store

    def _measured(self, seconds: float) -> None:
        self.pass_s = seconds if self.pass_s is None else KEEP * self.pass_s + (1 - KEEP) * seconds

    @property
    def bytes_allocated(self) -> int:
        """Bytes its K/V holds now."""
        return self.store.nbytes if self.store is not None else 0

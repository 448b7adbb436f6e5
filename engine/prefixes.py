"""Prefix park and restore: a slot's conversation kept when the slot changes hands, and given back to
a prompt that continues it (from the parked store or from another slot)."""

from __future__ import annotations

from mlx_lm.utils import common_prefix_len

from mlxchat.engine.events import ParkedSnapshot
from mlxchat.engine.kv.disk import DiskTier
from mlxchat.engine.kv.parked import ParkedEntry, ParkedStore
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.slots import Slot

# A prompt that keeps less than this share of a slot's history takes the slot for another conversation:
# the one it held is parked first (an ordinary next turn keeps nearly all of it).
CHANGES_HANDS = 0.5
# Fewer shared tokens than this (a chat template's opening) are cheaper to prefill than a state to copy.
RESTORE_MIN = 16
# How long closing the engine waits for saved KV still being written to disk.
DISK_WAIT_S = 10.0


class Prefixes:
    """The parked conversations and the rules for taking them back; runs on the engine's thread."""

    def __init__(self, budget_bytes: int, disk: DiskTier | None = None) -> None:
        self.parked = ParkedStore(budget_bytes)
        self.disk = disk if disk is not None and disk.enabled else None
        self.view: tuple[ParkedSnapshot, ...] = ()  # what the snapshot shows, published on the engine thread

    def park(self, slot: Slot, store: SlotKVStore) -> None:
        """Keeps the slot's conversation (its tokens and every layer's state) in the parked store, if it
        fits, and writes it to the disk tier, if there is one."""
        if not slot.history:
            return
        tokens = list(slot.history)
        why = self.parked.would_keep(store.bytes_used(slot.id))
        if why is not None:
            self.parked.drop(tokens, why)
            if self.disk is None:
                return
        state, nbytes = store.save(slot.id)
        if why is None:
            self.parked.put(ParkedEntry(tokens, state, nbytes, slot.label))
            self._publish()
        if self.disk is not None:
            self.disk.write(tokens, state)

    def save_all(self, slots: list[Slot], store: SlotKVStore) -> None:
        """Writes every slot's conversation to the disk tier and waits (DISK_WAIT_S at most) for the
        writes: the engine is closing, and a chat reopened later finds its KV there."""
        if self.disk is None:
            return
        for slot in slots:
            if slot.history:
                self.disk.write(list(slot.history), store.save(slot.id)[0])
        self.disk.close(DISK_WAIT_S)

    def restore(
        self, slot: Slot, slots: list[Slot], store: SlotKVStore, prompt: list[int], limit: int, exact: int
    ) -> str | None:
        """Puts into `slot` the parked conversation, the other slot's (copied) or the saved one on disk that
        gives `prompt` more cached tokens than the slot's own `exact` prefix; returns where it came from, or None.

        Window and recurrent layers are only taken back at a length they can roll back to (for a
        recurrent state, its whole history), as the slot's own history is.
        """
        best, source = exact + RESTORE_MIN - 1, None
        for key, entry in self.parked.entries.items():
            n = store.exact_within(len(entry.tokens), min(common_prefix_len(entry.tokens, prompt), limit))
            if n > best:
                best, source = n, key
        for other in slots:
            if other is not slot:
                n = store.exact_prefix(other.id, min(common_prefix_len(other.history, prompt), limit))
                if n > best:
                    best, source = n, other
        if self.disk is not None:
            saved, n = self.disk.best(prompt, limit)
            if saved is not None and len(saved.tokens) <= store.capacity:
                n = store.exact_within(len(saved.tokens), n)
                if n > best:
                    loaded = self.disk.load(saved)
                    if loaded is not None:
                        best, source = n, (loaded, list(saved.tokens))
        if source is None:
            return None
        if isinstance(source, tuple):
            state, tokens = source
            where = "disk"
        elif isinstance(source, Slot):
            state, _ = store.save(source.id)
            tokens, where = list(source.history), f"slot {source.id}"
        else:
            entry = self.parked.entries[source]
            state, tokens, where = entry.state, list(entry.tokens), "parked"
            # Most of it is in the slot now (the rest, a reply as generated, is what its next prompt
            # re-tokenizes): the entry moves, and is parked again when the slot changes hands. A branch
            # that shares less (a fork at an earlier message) leaves it for the chat itself.
            if best >= CHANGES_HANDS * len(entry.tokens):
                self.parked.take(source)
            else:
                self.parked.touch(source)
            self._publish()
        self.park(slot, store)
        store.load(slot.id, state, len(tokens))
        slot.history = tokens
        slot.rollback(store, best)
        return where

    def clear(self) -> None:
        """Forgets every parked state (a new plan gives the stores other shapes)."""
        self.parked.clear()
        self._publish()

    def _publish(self) -> None:
        self.view = tuple(
            ParkedSnapshot(e.label, len(e.tokens), e.nbytes) for e in reversed(self.parked.entries.values())
        )

"""What speculative decoding does for a model on this device, in words: F3 and `mlxchat doctor` say it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

# engine.devices.batching_note's words where a row's result does not depend on the rows beside it.
EXACT_BATCHING = "batched replies match"


def speculation_note(rolls_back: bool, batching: str) -> str:
    """Whether drafts run for a model whose slots can (`rolls_back`) give back rejected drafts, and whether
    its replies stay the same with them, from the device's `batching` note (engine.devices.batching_note)."""
    if not rolls_back:
        return ('none for this model (speculative = "lookup" or "draft" drafts nothing): its sliding-window layers, '
                "shorter than a slot, or its recurrent state cannot give back the K/V of rejected drafts")
    if batching.startswith(EXACT_BATCHING):
        return ('speculative = "lookup" and "draft" give the same replies as "off", token for token: their drafts '
                "are checked in a pass whose rows round as single steps do")
    return ('speculative = "lookup" and "draft" can change replies here, as batching can: the pass that checks drafts '
            "rounds otherwise than single steps")


def draft_note(name: str, drafted: int, accepted: int, kv_bytes: int) -> str:
    """Which draft model drafts for the chats set to "draft", how much of what it drafted the target took, and the
    K/V it holds (its own, beside the slots')."""
    from mlxchat.engine.memory import format_bytes

    taken = f"{accepted} of {drafted} drafted tokens taken ({100 * accepted / drafted:.0f}%)" if drafted else "none drafted yet"
    return f'draft model {name} drafts for chats with speculative = "draft": {taken}; its K/V {format_bytes(kv_bytes)}'


def model_speculation(loaded: LoadedModel, per_slot: int) -> str:
    """`speculation_note` for a loaded model whose slots hold `per_slot` tokens, on this device."""
    from mlxchat.engine.kv.slot_store import SlotKVStore

    store = SlotKVStore.for_model(loaded.model, 1, per_slot, True)  # (allocates nothing until a pass writes)
    return speculation_note(store.rolls_back, loaded.weights.batching_note)

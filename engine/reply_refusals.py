"""Why an engine will not start a reply, in the words both engines use (shown under the refused message)."""

from __future__ import annotations

SHUT_DOWN = "the engine has been shut down"
EMPTY = "there is nothing to answer: the chat is empty"


def no_such_slot(slot_id: int, n_slots: int) -> str:
    return f"there is no slot {slot_id}: the engine has {n_slots} slots"


def still_answering(slot_id: int) -> str:
    return f"slot {slot_id} is still answering: stop its reply first"


def does_not_fit(needed: int, slot_id: int, capacity: int, ctx_size: int, parallel: int) -> str:
    return (
        f"this message needs {needed} tokens of context but slot {slot_id} holds "
        f"{capacity} ({ctx_size} / {parallel} slots): shorten it, start a new chat, or use fewer slots"
    )


def unrenderable(exc: Exception) -> str:
    return f"the chat could not be rendered with the model's template: {exc}"

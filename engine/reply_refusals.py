"""Why an engine will not start a reply, in the words both engines use (shown under the refused message)."""

from __future__ import annotations

from mlxchat.engine.plan import SlotPlan
from mlxchat.engine.requests import Messages

SHUT_DOWN = "the engine has been shut down"
EMPTY = "there is nothing to answer: the chat is empty"
NO_IMAGES = "this model does not take images: load one that sees (a vision-language model) to send them"


def no_such_slot(slot_id: int, n_slots: int) -> str:
    return f"there is no slot {slot_id}: the engine has {n_slots} slots"


def still_answering(slot_id: int) -> str:
    return f"slot {slot_id} is still answering: stop its reply first"


def does_not_fit(needed: int, slot_id: int, capacity: int, plan: SlotPlan, messages: Messages | None) -> str:
    """A chat with earlier turns is told that the conversation, not only its new message, is what does not fit."""
    holds = f"slot {slot_id} holds {capacity} ({plan.ctx_size} / {plan.parallel} slots)"
    if sum(m.get("role") == "user" for m in messages or []) > 1:
        return (f"this chat needs {needed} tokens of context with its earlier turns, but {holds}: start a new chat "
                "(or fork this one at an earlier message), or use fewer slots")
    return (f"this message needs {needed} tokens of context but {holds}: shorten it, start a new chat, "
            "or use fewer slots")


def unrenderable(exc: Exception) -> str:
    return f"the chat could not be rendered with the model's template: {exc}"

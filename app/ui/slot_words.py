"""What the app says about a slot in words: a chat's status line and the notes when its seat changes, and
the bar of how full a slot's context is (the status line and the inspector share it)."""

from __future__ import annotations

from mlxchat.engine import SlotSnapshot

BAR_WIDTH = 12
NO_SLOT = "it borrows an idle one when you send"
# Where a chat's history comes from when it gets a slot back: what it left parked or saved, else a prefill.
COMES_BACK = "its history is read back where it is kept (parked, saved, in another slot), else prefilled again"
AGAIN = "the conversation is prefilled again on its next turn"


def usage_bar(used: int, capacity: int, width: int) -> str:
    """A bar `width` characters long, filled in proportion to `used` / `capacity`."""
    filled = min(width, round(width * used / capacity)) if capacity else 0
    return "█" * filled + "░" * (width - filled)


def idle(slot_id: int | None, history: bool) -> str:
    """The status line of a chat that is not answering; `history`: whether it has turns to come back to."""
    if slot_id is None:
        return f"no slot · {NO_SLOT}" + (f"; {COMES_BACK}" if history else "")
    return f"slot {slot_id} · idle"


def slot_line(slot: SlotSnapshot) -> str:
    """The slot's state, how full its context is (as a bar) and, while it works, its speed."""
    bar = usage_bar(slot.used, slot.capacity, BAR_WIDTH)
    capacity = slot.capacity or "?"  # a remote server that does not say its context
    state = "thinking" if slot.state == "decoding" and slot.reasoning_tokens is not None else slot.state
    text = f"slot {slot.id} · {state} · {slot.used} / {capacity} tokens {bar}"
    if slot.state != "idle":  # a speed is news only while the slot works
        text += f" · {slot.tok_s:.1f} tok/s"
    return text


def slot_lent(before: int | None) -> str:
    """The status line of a chat whose slot went to another chat (more chats than slots)."""
    return f"no slot · slot {before} went to another chat · {NO_SLOT}; {COMES_BACK}"


def seat_note(slot_id: int | None, before: int | None, kv_kept: bool) -> str:
    """The note in the conversation when the slots changed under the chat."""
    if slot_id is None:
        return f"This chat has no slot now; its text is kept: {NO_SLOT}, and {COMES_BACK}."
    if kv_kept:
        return f"Slot {slot_id} kept this chat's KV cache through the change of slots."
    if before is None:
        return f"This chat has slot {slot_id} now; {AGAIN}."
    if before != slot_id:
        return f"This chat moved from slot {before} to slot {slot_id}; {AGAIN}."
    return f"Slot {slot_id} was rebuilt without this chat's KV cache; {AGAIN}."


def queue_words(place: int, stop_key: str) -> tuple[str, str]:
    """The note where a queued message's reply will be, and the status line, for its place in line."""
    ordinal = {1: "next", 2: "2nd", 3: "3rd"}.get(place, f"{place}th")
    note = (f"Waiting for a slot, {ordinal} in line: every slot is answering another chat. It starts as "
            f"soon as one frees ({stop_key} takes it back).")
    return note, f"queued · {ordinal} in line for a slot · {stop_key} takes it back"

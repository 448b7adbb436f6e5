"""Which chat sits on which slot: the rules, apart from the session that applies them."""

from __future__ import annotations

from collections.abc import Sequence


def assign_slots(current: Sequence[int | None], parallel: int) -> list[int | None]:
    """The slot each chat (in tab order) gets out of `parallel` slots.

    A chat keeps its slot while that slot exists (so its KV cache can survive); the other chats
    take the free slots in tab order; chats beyond the number of slots get none.
    """
    kept = [slot if slot is not None and slot < parallel else None for slot in current]
    free = iter(sorted(set(range(parallel)) - set(kept)))
    return [slot if slot is not None else next(free, None) for slot in kept]

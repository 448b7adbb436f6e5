"""What the engine reports: the model it runs (EngineInfo) and, at any moment, every slot's state (EngineSnapshot)."""

from __future__ import annotations

from dataclasses import dataclass

from mlxchat.engine.events import EngineSnapshot, SlotSnapshot
from mlxchat.engine.kv.slot_store import SlotKVStore
from mlxchat.engine.prefixes import Prefixes
from mlxchat.engine.rate import RateMeter
from mlxchat.engine.slots import Slot
from mlxchat.engine.speculation.notes import speculation_note


@dataclass(frozen=True)
class EngineInfo:
    """What the engine reports about the model it runs (shown by the inspector and bench)."""

    model: str = ""
    device: str = ""
    blas: str = ""
    dtype: str = ""
    weights_bytes: int = 0
    batching: str = ""  # engine.devices.batching_note for the device and dtype


def engine_snapshot(
    slot_list: list[Slot],
    store: SlotKVStore,
    info: EngineInfo,
    memory: tuple[int, int],
    rate: RateMeter,
    prefixes: Prefixes,
    widest_pass: int,
    drafting: str = "",
) -> EngineSnapshot:
    """Every slot's state and the engine-wide figures, from the scheduler's parts (read from any thread); `drafting`:
    the draft model's note, if one is loaded (engine.speculation.notes.draft_note)."""
    slots = []
    allocated = store.nbytes
    held = [store.bytes_used(i) for i in range(store.n_slots)]
    for s in slot_list:
        r = s.request
        used = store.lengths[s.id] if s.id < store.n_slots else 0
        slots.append(
            SlotSnapshot(
                id=s.id,
                state=s.state,
                capacity=store.capacity,
                used=used,
                prompt_tokens=len(r.prompt) if r else 0,
                prompt_processed=r.prompt_processed if r else 0,
                cached_tokens=r.cached if r else 0,
                refilled_tokens=r.refilled if r else s.last_refilled,
                generated=r.generated if r else 0,
                tok_s=r.decode_tok_s() if r else s.last_tok_s,
                sampling=r.sampling if r else None,
                kv_bytes_allocated=allocated // store.n_slots,
                kv_bytes_used=held[s.id] if s.id < store.n_slots else 0,
                label=s.label,
                reasoning_tokens=r.split.reasoning_tokens if r and r.split.reasoning else None,
                drafted=r.drafted if r else 0,
                accepted=r.accepted if r else 0,
            )
        )
    active, peak = memory
    return EngineSnapshot(
        model=info.model,
        device=info.device,
        blas=info.blas,
        dtype=info.dtype,
        weights_bytes=info.weights_bytes,
        kv_bytes_allocated=allocated,
        kv_bytes_used=sum(held),
        active_bytes=active,
        peak_bytes=peak,
        aggregate_tok_s=rate.tok_s(),
        per_slot=store.capacity,
        slots=tuple(slots),
        batching=info.batching,
        parked=prefixes.view,
        park_budget_bytes=prefixes.parked.budget,
        disk=prefixes.disk.describe() if prefixes.disk else "",
        disk_notes=prefixes.disk.said() if prefixes.disk else (),
        widest_pass=widest_pass,
        kv_dtype=store.kv_type.name,
        speculation="; ".join(filter(None, [speculation_note(store.rolls_back, info.batching), drafting])),
    )

"""Evaluates a slot configuration (llama.cpp context semantics) for the engine, doctor and slider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlxchat.engine.kv.kinds import KVFootprint

DEFAULT_CTX_SIZE = 8192


@dataclass(frozen=True)
class SlotPlan:
    """The effective values of a (parallel, ctx_size, ctx_per_slot) choice, with what is wrong with it."""

    requested_parallel: int
    parallel: int
    ctx_size: int
    per_slot: int
    kv_bytes: int
    kv_bytes_per_slot: int
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the engine may be built with this plan (warnings allowed, errors not)."""
        return not self.errors

    @property
    def summary(self) -> str:
        """One line, as the doctor and the slider show it."""
        return f"{self.ctx_size} / {self.parallel} = {self.per_slot} tokens per slot"


@dataclass(frozen=True)
class SlotRequest:
    """What the user asked for (settings, flags, the slider): the input of plan_slots.

    `ctx_size` None means the user did not set it: then `ctx_per_slot` alone gives C = N x S,
    and with neither set C is DEFAULT_CTX_SIZE.
    """

    parallel: int
    ctx_size: int | None = None
    ctx_per_slot: int | None = None
    parallel_max: int = 8
    per_slot_floor: int = 1024
    per_slot_min: int = 256


def plan_slots(
    request: SlotRequest,
    trained_ctx: int | None,
    kv_bytes_per_token: int,
    kv_footprint: KVFootprint | None = None,
) -> SlotPlan:
    """Applies the context semantics of DESIGN.md: total / N per slot, clamps reported, floors checked.

    `kv_footprint`, when known, sizes each layer kind on its own (a window layer at min(window, per
    slot), a recurrent state once per slot); without it every layer costs kv_bytes_per_token a token.
    """
    parallel, ctx_size, ctx_per_slot = request.parallel, request.ctx_size, request.ctx_per_slot
    parallel_max, per_slot_floor, per_slot_min = request.parallel_max, request.per_slot_floor, request.per_slot_min
    warnings: list[str] = []
    errors: list[str] = []

    n = min(max(parallel, 1), max(parallel_max, 1))
    if n != parallel:
        warnings.append(f"parallel = {parallel} is outside 1..{parallel_max}: using {n} slots")

    if ctx_size is None:
        total = n * ctx_per_slot if ctx_per_slot else DEFAULT_CTX_SIZE
        per_slot = total // n
    else:
        total = ctx_size
        per_slot = total // n
        if ctx_per_slot is not None and ctx_per_slot > per_slot:
            warnings.append(
                f"ctx_per_slot = {ctx_per_slot} is more than ctx_size / parallel = {per_slot}: "
                f"using {per_slot} per slot"
            )
        elif ctx_per_slot is not None:
            per_slot = ctx_per_slot

    if trained_ctx and per_slot > trained_ctx:
        warnings.append(
            f"{per_slot} tokens per slot is more than the model was trained on ({trained_ctx}): "
            f"capped at {trained_ctx}"
        )
        per_slot = trained_ctx

    if per_slot < per_slot_min:
        errors.append(
            f"{total} / {n} = {per_slot} tokens per slot is below the minimum of {per_slot_min}: "
            f"use fewer slots or a larger total context"
        )
    elif per_slot < per_slot_floor:
        warnings.append(
            f"{total} / {n} = {per_slot} tokens per slot is below {per_slot_floor}: "
            f"a system prompt and a few turns may no longer fit"
        )

    per_slot_bytes = kv_footprint.per_slot_bytes(per_slot) if kv_footprint else per_slot * kv_bytes_per_token
    return SlotPlan(
        requested_parallel=parallel,
        parallel=n,
        ctx_size=total,
        per_slot=per_slot,
        kv_bytes=n * per_slot_bytes,
        kv_bytes_per_slot=per_slot_bytes,
        warnings=tuple(warnings),
        errors=tuple(errors),
    )

"""Evaluates a slot configuration (llama.cpp context semantics) for the engine, doctor and slider."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlxchat.engine.memory import format_bytes

if TYPE_CHECKING:
    from mlxchat.engine.kv.kinds import KVFootprint
    from mlxchat.engine.kv.kv_types import KVType

DEFAULT_CTX_SIZE = 8192


@dataclass(frozen=True)
class SlotPlan:
    """The effective values of a (parallel, ctx_size, ctx_per_slot) choice, with what is wrong with it."""

    requested_parallel: int
    parallel: int
    ctx_size: int
    per_slot: int
    kv_bytes: int  # every slot's K/V, the draft model's included
    kv_bytes_per_slot: int
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    kv_type: KVType | None = None  # how the slots store K/V (None: as the model computes them)
    kv_bytes_per_token: int = 0  # K+V of one token as stored (while every window still grows)
    draft_kv_bytes: int = 0  # the draft model's K/V, divided among the same slots (in kv_bytes)

    @property
    def ok(self) -> bool:
        """Whether the engine may be built with this plan (warnings allowed, errors not)."""
        return not self.errors

    @property
    def summary(self) -> str:
        """One line, as the doctor and the slider show it."""
        return f"{self.ctx_size} / {self.parallel} = {self.per_slot} tokens per slot"

    @property
    def kv_summary(self) -> str:
        """What the KV cache takes, and in what type, as the slots screen and the doctor show it."""
        per_token = f" · {kv_type_name(self.kv_type)}, {format_bytes(self.kv_bytes_per_token)} a token"
        draft = f" · the draft model's {format_bytes(self.draft_kv_bytes)} included"
        return (f"{format_bytes(self.kv_bytes)} ({format_bytes(self.kv_bytes_per_slot)} per slot)"
                + (per_token if self.kv_bytes_per_token else "") + (draft if self.draft_kv_bytes else ""))


@dataclass(frozen=True)
class ModelFacts:
    """What evaluating a slot request needs to know of a loaded model; the one evaluator of slot plans, kept
    so that the slider can evaluate again."""

    trained_ctx: int | None
    kv_bytes_per_token: int
    kv_footprint: KVFootprint | None = None  # each layer kind sized on its own
    kv_type: KVType | None = None  # as the slots store K/V
    draft_footprint: KVFootprint | None = None  # the draft model's K/V (draft_model), in the same slots

    def evaluate(self, request: SlotRequest, capped: bool = True) -> SlotPlan:
        """`request` evaluated for this model (and its draft model): its K/V's size and type, its trained context
        where `capped`."""
        return plan_slots(request, self.trained_ctx if capped else None, self.kv_bytes_per_token, self.kv_footprint,
                          self.kv_type, self.draft_footprint)


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
    kv_type: KVType | None = None,
    draft_footprint: KVFootprint | None = None,
) -> SlotPlan:
    """Applies the context semantics of DESIGN.md: total / N per slot, clamps reported, floors checked.

    `kv_footprint`, when known, sizes each layer kind on its own (a window layer at min(window, per
    slot), a recurrent state once per slot); without it every layer costs kv_bytes_per_token a token. Both count
    K/V as stored in `kv_type`, which the plan carries to the slots. `draft_footprint`: a draft model's, whose K/V
    is divided among the same slots, each as long as theirs (counted with theirs).
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

    per_token = kv_footprint.bytes_per_token if kv_footprint else kv_bytes_per_token

    def slot_bytes(tokens: int) -> int:
        draft = draft_footprint.per_slot_bytes(tokens) if draft_footprint else 0
        return (kv_footprint.per_slot_bytes(tokens) if kv_footprint else tokens * kv_bytes_per_token) + draft

    if per_slot >= per_slot_min and per_slot < per_slot_floor:
        # What the floor would cost, in the type the slots store: a narrower kv_dtype makes it cheaper.
        cost = (f" ({per_slot_floor} per slot for {n} slots takes {format_bytes(n * slot_bytes(per_slot_floor))} of "
                f"KV in {kv_type_name(kv_type)})" if per_token else "")
        warnings.append(
            f"{total} / {n} = {per_slot} tokens per slot is below {per_slot_floor}: "
            f"a system prompt and a few turns may no longer fit{cost}"
        )

    per_slot_bytes = slot_bytes(per_slot)
    return SlotPlan(
        requested_parallel=parallel,
        parallel=n,
        ctx_size=total,
        per_slot=per_slot,
        kv_bytes=n * per_slot_bytes,
        kv_bytes_per_slot=per_slot_bytes,
        warnings=tuple(warnings),
        errors=tuple(errors),
        kv_type=kv_type,
        kv_bytes_per_token=per_token,
        draft_kv_bytes=n * draft_footprint.per_slot_bytes(per_slot) if draft_footprint else 0,
    )


def kv_type_name(kv_type: KVType | None) -> str:
    """How a plan's K/V type is named to the user."""
    return (kv_type.name if kv_type else None) or "the model's own type"

"""The context semantics table: clamps, floors, refusals, the trained-context cap."""

from __future__ import annotations

import pytest

from mlxchat.engine.kv.kv_types import KVType
from mlxchat.engine.plan import SlotRequest, plan_slots

BYTES_PER_TOKEN = 1000


def plan(parallel=4, ctx_size=8192, ctx_per_slot=None, trained_ctx=None, parallel_max=8):
    request = SlotRequest(parallel, ctx_size, ctx_per_slot, parallel_max, per_slot_floor=1024, per_slot_min=256)
    return plan_slots(request, trained_ctx=trained_ctx, kv_bytes_per_token=BYTES_PER_TOKEN)


@pytest.mark.parametrize(
    ("kwargs", "parallel", "per_slot", "n_warnings", "ok"),
    [
        ({}, 4, 2048, 0, True),
        ({"parallel": 8}, 8, 1024, 0, True),
        ({"parallel": 8, "ctx_size": 4096}, 8, 512, 1, True),  # below the floor: warned
        ({"parallel": 8, "ctx_size": 1024}, 8, 128, 0, False),  # below the minimum: refused
        ({"parallel": 12}, 8, 1024, 1, True),  # clamped to parallel_max
        ({"parallel": 0}, 1, 8192, 1, True),  # clamped up to 1
        ({"parallel": 3, "ctx_size": 8192}, 3, 2730, 0, True),  # floor(C / N)
        ({"ctx_size": None, "ctx_per_slot": 3000}, 4, 3000, 0, True),  # S alone: C = N x S
        ({"ctx_per_slot": 1500}, 4, 1500, 0, True),  # S under C / N wins
        ({"ctx_per_slot": 4096}, 4, 2048, 1, True),  # S over C / N: warned, C / N used
        ({"parallel": 1, "trained_ctx": 4096}, 1, 4096, 1, True),  # trained-context cap
        ({"ctx_size": None}, 4, 2048, 0, True),  # nothing set: the 8192 default
    ],
)
def test_context_semantics(kwargs, parallel, per_slot, n_warnings, ok):
    p = plan(**kwargs)
    assert (p.parallel, p.per_slot, len(p.warnings), p.ok) == (parallel, per_slot, n_warnings, ok)
    assert p.kv_bytes == p.parallel * p.per_slot * BYTES_PER_TOKEN


def test_messages_say_what_to_change():
    assert plan(parallel=8, ctx_size=4096).warnings == (
        "4096 / 8 = 512 tokens per slot is below 1024: a system prompt and a few turns may no longer fit (1024 per "
        "slot for 8 slots takes 7.8 MiB of KV in the model's own type)",
    )
    # The floor's cost is counted in the type the slots store K/V in.
    narrow = plan_slots(SlotRequest(8, 4096), None, BYTES_PER_TOKEN // 2, kv_type=KVType("float16"))
    assert narrow.warnings[0].endswith("(1024 per slot for 8 slots takes 3.9 MiB of KV in float16)")
    assert narrow.kv_summary == "2.0 MiB (250.0 KiB per slot) · float16, 500 B a token"
    assert "use fewer slots or a larger total context" in plan(parallel=8, ctx_size=1024).errors[0]
    assert plan(parallel=12).warnings == ("parallel = 12 is outside 1..8: using 8 slots",)
    assert plan().summary == "8192 / 4 = 2048 tokens per slot"


def test_kv_bytes_constant_in_n():
    sizes = [plan(parallel=n, ctx_size=12000).kv_bytes for n in (1, 2, 4, 8)]
    assert max(sizes) / min(sizes) < 1.01

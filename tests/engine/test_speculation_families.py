"""Every family the engine runs (tests/engine/test_family_matrix.py's tiny models): replies with lookup drafts equal
the replies without, greedy and seeded, six slots busy at once (each prompt once each way), prompts read in 4-token
chunks. A family whose layers cannot give back rejected drafts (windows shorter than a slot, recurrent state) drafts
nothing, as pinned in tests/family_outcomes.py's NO_SPECULATION. The tiny models' greedy replies repeat runs of their
context, so the families that roll back draft and have drafts checked (but NO_REPEAT's, which repeat nothing)."""

from __future__ import annotations

import dataclasses

import pytest

from mlxchat.engine.scheduler import SlotScheduler
from mlxchat.engine.loading.batch_check import ready_for_slots
from tests.engine.test_family_matrix import TINY
from tests.engine.test_families import plan, tokenizer  # noqa: F401 (the fixture)
from tests.engine.test_speculation import GREEDY, PROMPTS, SEEDED, answered
from tests.family_outcomes import NO_REPEAT, NO_SPECULATION, REFUSED_AT_LOAD
from tests.tiny_configs import build

RUN = sorted(set(TINY) - set(REFUSED_AT_LOAD))
# Greedy replies long enough for every tiny model that rolls back to repeat a run (but NO_REPEAT's) and draft.
LENGTHS = {"greedy": 48, "seeded": 24}
# Both ways in one batch, each prompt once greedy and once seeded: six slots of the 128 tokens each that
# plan()'s four of 512 give, so the same families roll back (a window shorter than a slot) as there.
WAYS = [way for way in LENGTHS for _ in PROMPTS]
SAMPLINGS = [dataclasses.replace(GREEDY if way == "greedy" else SEEDED, max_tokens=LENGTHS[way]) for way in WAYS]


@pytest.mark.parametrize("family", RUN)
def test_replies_with_drafts_equal_replies_without(family: str, tokenizer) -> None:
    model = build(TINY[family], scale=2.0)
    slots = plan(len(WAYS), 768)
    assert slots.per_slot == plan().per_slot
    plain, _ = answered(SlotScheduler(ready_for_slots(model, tokenizer), slots, prefill_chunk=4), PROMPTS * 2, SAMPLINGS)
    core = SlotScheduler(ready_for_slots(model, tokenizer), slots, prefill_chunk=4)
    core.verifier.row_cost = 0.0  # (rows free: every reply drafts all it can, so every family's drafts are checked)
    lookup = [dataclasses.replace(sampling, speculative="lookup") for sampling in SAMPLINGS]
    drafted, stats = answered(core, PROMPTS * 2, lookup)
    for way in LENGTHS:
        assert [d for d, w in zip(drafted, WAYS) if w == way] == [p for p, w in zip(plain, WAYS) if w == way], \
            f"{family}, {way}"
    rolls_back = family not in NO_SPECULATION
    assert core.store.rolls_back == rolls_back, f"{family}: NO_SPECULATION in tests/family_outcomes.py"
    drafts = {way: sum(s.drafted_tokens for s, w in zip(stats, WAYS) if w == way) for way in LENGTHS}
    assert not sum(drafts.values()) or rolls_back, f"{family} drafted, and cannot give drafts back"
    if rolls_back and family not in NO_REPEAT:  # (seeded: flat distributions may not repeat)
        assert drafts["greedy"] > 0, f"{family} drafted nothing"

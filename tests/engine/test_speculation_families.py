"""Every family the engine runs (tests/engine/test_family_matrix.py's tiny models): replies with lookup drafts equal
the replies without, greedy and seeded, three slots busy at once, prompts read in 4-token chunks. A family whose
layers cannot give back rejected drafts (windows shorter than a slot, recurrent state) drafts nothing, as pinned
in tests/family_outcomes.py's NO_SPECULATION. The tiny models' greedy replies repeat runs of their context, so the
families that roll back draft and have drafts checked (but NO_REPEAT's, which repeat nothing)."""

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


@pytest.mark.parametrize("family", RUN)
def test_replies_with_drafts_equal_replies_without(family: str, tokenizer) -> None:
    model = build(TINY[family], scale=2.0)
    for way, sampling in (("greedy", GREEDY), ("seeded", SEEDED)):
        sampling = dataclasses.replace(sampling, max_tokens=LENGTHS[way])
        plain, _ = answered(SlotScheduler(ready_for_slots(model, tokenizer), plan(), prefill_chunk=4), PROMPTS, sampling)
        core = SlotScheduler(ready_for_slots(model, tokenizer), plan(), prefill_chunk=4)
        core.verifier.row_cost = 0.0  # (rows free: every reply drafts all it can, so every family's drafts are checked)
        drafted, stats = answered(core, PROMPTS, dataclasses.replace(sampling, speculative="lookup"))
        assert drafted == plain, f"{family}, {way}"
        rolls_back = family not in NO_SPECULATION
        assert core.store.rolls_back == rolls_back, f"{family}: NO_SPECULATION in tests/family_outcomes.py"
        drafts = sum(s.drafted_tokens for s in stats)
        assert not drafts or rolls_back, f"{family} drafted, and cannot give drafts back"
        if way == "greedy" and rolls_back and family not in NO_REPEAT:  # (seeded: flat distributions may not repeat)
            assert drafts > 0, f"{family} drafted nothing"

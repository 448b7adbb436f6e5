"""Every family the engine runs (tests/engine/test_family_matrix.py's tiny models): replies with lookup drafts equal
the replies without, greedy and seeded, three slots busy at once, prompts read in 4-token chunks. A family whose
layers cannot give back rejected drafts (windows shorter than a slot, recurrent state) drafts nothing, as pinned
in tests/family_outcomes.py's NO_SPECULATION."""

from __future__ import annotations

import dataclasses

import pytest

from mlxchat.engine.scheduler import SlotScheduler
from tests.engine.test_family_matrix import TINY
from tests.engine.test_families import plan, tokenizer  # noqa: F401 (the fixture)
from tests.engine.test_speculation import GREEDY, PROMPTS, SEEDED, answered
from tests.family_outcomes import NO_SPECULATION, REFUSED_AT_LOAD
from tests.tiny_configs import build

RUN = sorted(set(TINY) - set(REFUSED_AT_LOAD))
SHORT = {"max_tokens": 24}


@pytest.mark.parametrize("family", RUN)
def test_replies_with_drafts_equal_replies_without(family: str, tokenizer) -> None:
    model = build(TINY[family], scale=2.0)
    for sampling in (dataclasses.replace(GREEDY, **SHORT), dataclasses.replace(SEEDED, **SHORT)):
        plain, _ = answered(SlotScheduler(model, tokenizer, plan(), prefill_chunk=4), PROMPTS, sampling)
        core = SlotScheduler(model, tokenizer, plan(), prefill_chunk=4)
        drafted, stats = answered(core, PROMPTS, dataclasses.replace(sampling, speculative="lookup"))
        assert drafted == plain, f"{family}, {'greedy' if sampling.temperature == 0 else 'seeded'}"
        rolls_back = family not in NO_SPECULATION
        assert core.store.rolls_back == rolls_back, f"{family}: NO_SPECULATION in tests/family_outcomes.py"
        # (drafts were checked where the family rolls back, none drafted where it cannot)
        assert (sum(s.drafted_tokens for s in stats) > 0) == rolls_back, family

"""The pacing rule: a prompt read while slots stream gets chunks that keep their step within the stall on average."""

from __future__ import annotations

import pytest

from mlxchat.engine.prefill.pacing import BURST, FIRST_CHUNK, MIN_CHUNK, STALL, StepCosts


def steady(costs: StepCosts, decode_s: float = 0.1) -> StepCosts:
    for _ in range(5):
        costs.record(decode_s, prompt_tokens=0, decode_rows=3)
    return costs


def test_the_chunk_grows_while_its_steps_are_cheap_and_shrinks_when_they_pass_the_burst():
    costs = steady(StepCosts())
    assert costs.chunk(256) == FIRST_CHUNK  # nothing measured with a prompt yet
    costs.record(0.12, prompt_tokens=32, decode_rows=3)  # 0.02 s over a decode step, BURST allows 0.4
    assert costs.chunk(256) == 64  # at most twice the last
    costs.record(1.3, prompt_tokens=64, decode_rows=3)  # 1.2 s over: too slow by 0.4 / 1.2
    assert costs.streaming_chunk == 32  # at most halved (and none until the streams are paid back)
    costs.record(0.6, prompt_tokens=32, decode_rows=3)  # 0.5 s over
    assert costs.streaming_chunk == round(32 * (BURST - 1) * 0.1 / 0.5)
    for _ in range(10):
        costs.record(10.0, prompt_tokens=costs.streaming_chunk, decode_rows=3)
    assert costs.streaming_chunk == MIN_CHUNK  # never below: the prompt must still finish
    assert StepCosts().chunk(4) == 4  # nor more than the pass may read


def test_a_chunk_that_costs_more_than_the_stall_is_paid_back_by_steps_without_one():
    costs = steady(StepCosts())
    allowed = (STALL - 1) * 0.1
    costs.record(0.1 + allowed + 0.25, prompt_tokens=32, decode_rows=3)  # 0.25 s more than the stall allows
    waited = 0
    while costs.chunk(256) == 0:
        costs.record(0.1, prompt_tokens=0, decode_rows=3)  # the streams' step alone
        waited += 1
    # The steps the excess is worth, less the credit the streams' steps before it left (one step's), and no more.
    assert waited == -(-(0.25 - allowed) // allowed)
    costs.record(0.1 + allowed - 0.01, prompt_tokens=32, decode_rows=3)  # within the stall: nothing owed
    assert costs.chunk(256) > 0


def test_the_step_after_a_chunk_is_charged_to_it_not_to_the_streams():
    # Where the chunk shares the pipelined decode pass, the next step waits for the rest of its pass.
    costs = steady(StepCosts())
    costs.record(0.3, prompt_tokens=32, decode_rows=3)  # 0.2 s over a decode step: within BURST's 0.4
    costs.record(0.5, prompt_tokens=0, decode_rows=3)  # its pass ran on: 0.4 s more
    assert costs.decode_s == pytest.approx(0.1)  # the streams' step is not taken for 0.5 s
    owed = 0.2 + 0.4 - 3 * (STALL - 1) * 0.1  # (the steps before it left one step's credit)
    assert costs.owed_s == pytest.approx(owed)  # what the chunk took beyond its two steps' stall, its tail included
    assert costs.streaming_chunk == round(32 * (BURST - 1) * 0.1 / 0.6)  # sized by all it took (0.6 s), not 0.2 s
    costs.record(0.1, prompt_tokens=0, decode_rows=3)  # the step after is the streams' own again: it pays
    assert costs.owed_s == pytest.approx(owed - (STALL - 1) * 0.1)


def test_a_higher_stall_lets_the_prompt_take_more_of_the_steps():
    gentle, eager = steady(StepCosts(stall=2.0)), steady(StepCosts(stall=4.0))
    for costs in (gentle, eager):
        costs.record(0.39, prompt_tokens=40, decode_rows=3)  # 0.29 s over a 0.1 s decode step
    assert gentle.chunk(256) == 0 < eager.chunk(256)


def test_steps_without_streaming_slots_teach_nothing():
    costs = StepCosts()
    costs.record(2.0, prompt_tokens=256, decode_rows=0)  # a prompt read alone
    costs.record(0.5, prompt_tokens=0, decode_rows=0)
    assert costs.decode_s is None and costs.chunk(256) == FIRST_CHUNK


def test_the_setting_reaches_the_engine_the_app_starts(tiny_model_dir, tmp_path):
    from mlxchat.app.config.settings import Settings
    from mlxchat.app.session.start import start_engine

    started = start_engine(Settings(model=str(tiny_model_dir), prefill_stall=3.5), lambda progress: None)
    try:
        assert started.engine.core.costs.stall == 3.5
    finally:
        started.engine.shutdown()

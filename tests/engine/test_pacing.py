"""The pacing rule: a prompt read while slots stream gets the chunk that keeps their step within the stall."""

from __future__ import annotations

from mlxchat.engine.prefill.pacing import FIRST_CHUNK, MIN_CHUNK, STALL, StepCosts


def steady(costs: StepCosts, decode_s: float = 0.1) -> StepCosts:
    for _ in range(5):
        costs.record(decode_s, prompt_tokens=0, decode_rows=3)
    return costs


def test_the_chunk_grows_while_steps_are_cheap_and_shrinks_when_they_are_not():
    costs = steady(StepCosts())
    assert costs.chunk(256) == FIRST_CHUNK  # nothing measured with a prompt yet
    costs.record(0.12, prompt_tokens=32, decode_rows=3)  # 0.02 s over a decode step, STALL allows 0.08
    assert costs.chunk(256) == 64  # at most twice the last
    costs.record(0.30, prompt_tokens=64, decode_rows=3)  # 0.2 s over: too slow by 0.08 / 0.2
    assert costs.chunk(256) == 32  # at most halved
    costs.record(0.16, prompt_tokens=32, decode_rows=3)  # 0.06 s over
    assert costs.chunk(256) == round(32 * (STALL - 1) * 0.1 / 0.06)
    for _ in range(10):
        costs.record(1.0, prompt_tokens=costs.chunk(256), decode_rows=3)
    assert costs.chunk(256) == MIN_CHUNK  # never below: the prompt must still finish
    assert costs.chunk(4) == 4  # nor more than the pass may read


def test_a_higher_stall_lets_the_prompt_take_more_of_each_step():
    gentle, eager = steady(StepCosts()), steady(StepCosts(stall=4.0))
    for costs in (gentle, eager):
        costs.record(0.25, prompt_tokens=40, decode_rows=3)  # 0.15 s over a 0.1 s decode step
    assert gentle.chunk(256) < 40 < eager.chunk(256)


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

"""The real engine on the tiny generated model: batching, multi-turn caching, limits and faults."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from mlxchat.engine.events import Done, SamplingParams, TextDelta
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.plan import SlotRequest, plan_slots
from mlxchat.engine.loading.batch_check import ready_for_slots

PROMPTS = [
    "Hello, how are you?",
    "Paris is the capital of France. Tell me more about it, please.",
    "Numbers like 1024 and 2048",
    "The quick brown fox",
]
GREEDY_40 = SamplingParams(max_tokens=40, ignore_eos=True)


def make_plan(parallel: int = 4, ctx_size: int = 2048):
    request = SlotRequest(parallel, ctx_size, per_slot_floor=128, per_slot_min=32)
    return plan_slots(request, trained_ctx=None, kv_bytes_per_token=0)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from mlx_lm import load

    return load(str(tiny_model_dir))


@pytest.fixture
def make_engine(tiny):
    engines = []

    def make(parallel: int = 4, ctx_size: int = 2048, prefill_chunk: int = 16) -> Engine:
        engine = Engine(ready_for_slots(*tiny), make_plan(parallel, ctx_size), prefill_chunk=prefill_chunk)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.shutdown()


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_batched_greedy_equals_each_prompt_alone(make_engine):
    engine = make_engine()
    alone = []
    for prompt in PROMPTS:
        alone.append(engine.submit(0, chat(prompt), sampling=GREEDY_40).result(60))
        engine.clear(0)
    handles = [engine.submit(i, chat(p), sampling=GREEDY_40) for i, p in enumerate(PROMPTS)]
    together = [h.result(60) for h in handles]
    for a, b in zip(alone, together):
        assert a.stats.generated_tokens >= 32
        assert (b.reason, b.text) == (a.reason, a.text)


def test_skewed_lengths_match_alone(make_engine):
    """One slot with a long history and three short ones: the per-slot attention path."""
    engine = make_engine(ctx_size=4096)
    long_prompt = " ".join(PROMPTS * 6)
    alone = [engine.submit(0, chat(long_prompt), sampling=GREEDY_40).result(60)]
    engine.clear(0)
    for prompt in PROMPTS[1:]:
        alone.append(engine.submit(0, chat(prompt), sampling=GREEDY_40).result(60))
        engine.clear(0)
    prompts = [long_prompt, *PROMPTS[1:]]
    handles = [engine.submit(i, chat(p), sampling=GREEDY_40) for i, p in enumerate(prompts)]
    assert engine.core.per_slot_dispatch
    for a, h in zip(alone, handles):
        assert h.result(60).text == a.text
    assert alone[0].stats.prompt_tokens > 5 * alone[1].stats.prompt_tokens


def test_second_turn_prefills_only_new_tokens(make_engine, tiny):
    tokenizer = tiny[1]
    engine = make_engine()
    opening = " ".join(PROMPTS)
    first = engine.submit(0, chat(opening), sampling=GREEDY_40).result(60)
    history = list(engine.core.slots[0].history)
    turn2 = chat(opening) + [
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "Tell me more."},
    ]
    prompt2 = tokenizer.apply_chat_template(turn2, add_generation_prompt=True)
    common = next(i for i, (a, b) in enumerate(zip(history + [-1], prompt2)) if a != b)
    second = engine.submit(0, turn2, sampling=GREEDY_40).result(60)
    assert second.stats.cached_tokens == common
    assert second.stats.prefilled_tokens == len(prompt2) - common
    # The whole first prompt is reused (the random model's reply does not re-tokenize the same).
    assert common >= first.stats.prompt_tokens > 40

    # Editing the first user message rolls the slot back to the common prefix.
    edited = chat("Hello, how is it going?")
    prompt3 = tokenizer.apply_chat_template(edited, add_generation_prompt=True)
    history = list(engine.core.slots[0].history)
    common3 = next(i for i, (a, b) in enumerate(zip(history, prompt3)) if a != b)
    third = engine.submit(0, edited, sampling=GREEDY_40).result(60)
    assert (third.stats.cached_tokens, third.stats.prefilled_tokens) == (common3, len(prompt3) - common3)
    engine.clear(0, park=False)  # forgets; the turn 2 the edit parked shares only a template's opening
    fresh = engine.submit(0, edited, sampling=GREEDY_40).result(60)
    assert (fresh.stats.restored_from, fresh.stats.cached_tokens) == (None, 0) and fresh.text == third.text


def test_prompt_that_does_not_fit_is_refused(make_engine):
    engine = make_engine(parallel=8, ctx_size=512)  # 64 tokens per slot
    done = engine.submit(3, chat(" ".join(PROMPTS * 3))).result(30)
    assert done.refused and done.reason == "error"
    assert "holds 64" in done.error and "fewer slots" in done.error and "shorten it" in done.error
    assert engine.core.slots[3].history == []
    # A conversation that outgrew its slot (fewer tokens per slot since): the history is what does not fit.
    talk = [*chat(PROMPTS[0]), {"role": "assistant", "content": " ".join(PROMPTS * 2)}, *chat("And then?")]
    done = engine.submit(3, talk).result(30)
    assert done.refused and "with its earlier turns" in done.error and "shorten it" not in done.error


def test_reply_stops_at_the_end_of_its_slot(make_engine):
    engine = make_engine(parallel=8, ctx_size=512)
    done = engine.submit(0, chat("Hi"), sampling=SamplingParams(max_tokens=1000, ignore_eos=True)).result(60)
    assert done.reason == "context"
    assert engine.snapshot().slots[0].used == 64


def test_cancel_takes_effect_within_a_step_and_keeps_the_slot_consistent(make_engine):
    engine = make_engine()
    generated = []

    def cancel_at_third_token(event):
        # Runs on the engine thread, so the cancel is queued exactly when token 3 comes out.
        if isinstance(event, TextDelta):
            generated.append(engine.snapshot().slots[0].generated)
            if len(generated) == 3:
                engine.cancel(0)

    sampling = SamplingParams(max_tokens=1000, ignore_eos=True)
    done = engine.submit(0, chat("Hello"), sampling=sampling, on_event=cancel_at_third_token).result(30)
    assert done.reason == "cancelled" and done.text
    assert done.stats.generated_tokens <= generated[2] + 1
    assert len(engine.core.slots[0].history) == engine.core.store.lengths[0]
    assert engine.submit(0, chat("Hello"), sampling=GREEDY_40).result(30).reason == "length"


def test_error_in_one_slot_leaves_the_others_running(make_engine):
    engine = make_engine()

    def explode(event):
        if isinstance(event, TextDelta):
            raise RuntimeError("consumer broke")

    healthy = engine.submit(0, chat(PROMPTS[0]), sampling=GREEDY_40)
    broken = engine.submit(1, chat(PROMPTS[1]), sampling=GREEDY_40, on_event=explode)
    assert broken.result(30).reason == "error"
    assert "consumer broke" in broken.done.error
    done = healthy.result(30)
    assert done.reason == "length" and done.stats.generated_tokens == 40


def test_shutdown_mid_stream_returns_after_the_step_in_progress(make_engine):
    engine = make_engine()
    steps, step = [], engine.core.step
    engine.core.step = lambda: (steps.append(1), step())[1]
    handles = [engine.submit(i, chat(p), sampling=SamplingParams(max_tokens=10_000, ignore_eos=True)) for i, p in enumerate(PROMPTS)]
    next(iter(handles[0].events(timeout=30)))
    before = len(steps)
    engine.shutdown()
    assert not engine.alive
    assert len(steps) - before <= 1  # the step under way when it was asked, and none more
    assert all(h.result(1).reason == "cancelled" for h in handles)


def test_repartition_keeps_what_fits(make_engine):
    engine = make_engine(parallel=4, ctx_size=2048)
    for i, p in enumerate(PROMPTS):
        engine.submit(i, chat(p), sampling=GREEDY_40).result(30)
    survived = engine.repartition(make_plan(parallel=2, ctx_size=2048)).result(30)
    assert survived == {0: True, 1: True, 2: False, 3: False}
    assert [s.capacity for s in engine.snapshot().slots] == [1024, 1024]
    again = engine.submit(1, chat(PROMPTS[1]), sampling=GREEDY_40).result(30)
    assert again.stats.cached_tokens > 0


def test_kv_bytes_constant_in_n(make_engine):
    sizes = []
    for n in (1, 2, 4, 8):
        engine = make_engine(parallel=n, ctx_size=2048)
        engine.submit(0, chat("Hi"), sampling=SamplingParams(max_tokens=2)).result(30)
        sizes.append(engine.snapshot().kv_bytes_allocated)
    assert len(set(sizes)) == 1 and sizes[0] > 0


def test_seeded_sampling_is_reproducible(make_engine):
    engine = make_engine()
    params = SamplingParams(temperature=0.9, top_p=0.9, top_k=50, max_tokens=20, seed=7, ignore_eos=True)
    a = engine.submit(0, chat("Hi"), sampling=params)
    b = engine.submit(1, chat("Hi"), sampling=params)
    assert a.result(30).text == b.result(30).text


def test_deltas_add_up_to_the_reply_and_callbacks_run_off_the_caller_thread(make_engine):
    engine = make_engine()
    threads, deltas = set(), []

    def on_event(event):
        threads.add(threading.current_thread().name)
        if isinstance(event, TextDelta):
            deltas.append(event.text)

    handle = engine.submit(0, chat("Hello"), sampling=GREEDY_40, on_event=on_event)
    done = handle.result(30)
    assert isinstance(done, Done) and "".join(deltas) == done.text and len(deltas) > 1
    assert threads == {"mlxchat-engine"}
    # A caller that streams by callback (the app's session) never reads the handle's events: the handle
    # keeps only the Done, not every token of the reply.
    ended = threading.Event()
    again = engine.submit(1, chat("Hello"), sampling=GREEDY_40,
                          on_event=lambda event: ended.set() if isinstance(event, Done) else None)
    assert ended.wait(30)
    assert again._events.qsize() == 1 and again.result(0).text == done.text


def test_busy_or_missing_slot_is_refused(make_engine):
    engine = make_engine(parallel=2)
    running = engine.submit(0, chat("Hi"), sampling=SamplingParams(max_tokens=10_000, ignore_eos=True))
    busy = engine.submit(0, chat("Hi")).result(30)
    assert busy.refused and "still answering" in busy.error
    missing = engine.submit(5, chat("Hi")).result(30)
    assert missing.refused and "no slot 5" in missing.error
    engine.cancel(0)
    assert running.result(30).reason == "cancelled"


def test_engine_imports_no_textual():
    code = "import sys, mlxchat.engine.scheduler, mlxchat.engine.bench.runners; assert 'textual' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

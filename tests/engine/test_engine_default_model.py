"""The engine on the real default model (SmolLM2-135M, as the app holds it and as float32): right answers,
batching exact."""

from __future__ import annotations

import pytest

from mlxchat.engine.events import SamplingParams
from mlxchat.app.paths import models_cache_dir
from mlxchat.engine.loading.models import LoadedModel, LoadOptions, load_model
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.plan import SlotRequest
from tests.markers import needs_default_model

pytestmark = needs_default_model

QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
]


# "auto" is what the app runs (quantized layers kept as stored where the kernels run); float32 is the other path.
@pytest.fixture(scope="module", params=["auto", "float32"])
def engine(request):
    loaded: LoadedModel = load_model(None, LoadOptions(request.param, cache_dir=models_cache_dir()))
    plan = loaded.facts.evaluate(SlotRequest(parallel=4, ctx_size=4096))
    engine = Engine(loaded.ready, plan)
    yield engine
    engine.shutdown()


def ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def test_answers_paris_and_stops_at_the_end_of_turn(engine: Engine) -> None:
    done = engine.submit(0, ask(QUESTIONS[0]), sampling=SamplingParams(max_tokens=48)).result(120)
    assert "Paris" in done.text
    assert done.reason == "stop"


def test_batched_greedy_equals_alone_on_the_real_model(engine: Engine) -> None:
    sampling = SamplingParams(max_tokens=32, ignore_eos=True)
    alone = []
    for question in QUESTIONS:
        alone.append(engine.submit(1, ask(question), sampling=sampling).result(120).text)
        engine.clear(1)
    handles = [engine.submit(i + 1, ask(q), sampling=sampling) for i, q in enumerate(QUESTIONS)]
    assert [h.result(120).text for h in handles] == alone


def test_cached_second_turn_equals_a_fresh_one(engine: Engine) -> None:
    """A reply that ends on EOS while the next pass is in flight leaves the slot's K/V exact."""
    first = engine.submit(0, ask(QUESTIONS[0]), sampling=SamplingParams(max_tokens=48)).result(120)
    assert first.reason == "stop"
    chat = ask(QUESTIONS[0]) + [
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And of Italy?"},
    ]
    sampling = SamplingParams(max_tokens=24, ignore_eos=True)
    cached = engine.submit(0, chat, sampling=sampling).result(120)
    # From scratch: no slot and no parked entry may lend it a prefix.
    for slot in range(len(engine.core.slots)):
        engine.clear(slot, park=False)
    engine.call(engine.core.prefixes.clear).result(10)
    fresh = engine.submit(3, chat, sampling=sampling).result(120)
    assert cached.stats.cached_tokens > first.stats.prompt_tokens
    assert fresh.stats.cached_tokens == 0
    assert cached.text == fresh.text

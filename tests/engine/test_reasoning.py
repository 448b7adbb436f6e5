"""Reasoning told from answer by the real engine, on tiny models whose greedy reply is a known script
(tests/tiny_reasoning.py): the parts of each event, the budget that ends reasoning, the thinking switch, and
the next turn's prompt and cached prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.engine.requests import render
from mlxchat.engine.events import Done, SamplingParams, TextDelta
from tests.started import start_as_the_app
from tests.tiny_reasoning import ANSWER, REASONING, reply_tokens

STYLES = ("switch", "opens", "channel")
GREEDY = SamplingParams(max_tokens=64)


def ask(engine, slot: int, messages, sampling: SamplingParams = GREEDY) -> tuple[list[TextDelta], Done]:
    events: list = []
    done = engine.submit(slot, messages, sampling=sampling, on_event=events.append).result(60)
    return [e for e in events if isinstance(e, TextDelta)], done


def joined(deltas: list[TextDelta], part: str) -> str:
    return "".join(d.text for d in deltas if d.part == part)


@pytest.fixture
def started(reasoning_model, tmp_path: Path):
    engines = []

    def start(style: str, parallel: int = 2):
        engine = start_as_the_app(reasoning_model(style), tmp_path / "cache", parallel=parallel)
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        engine.shutdown()


@pytest.mark.parametrize("style", STYLES)
def test_reasoning_and_answer_come_as_their_own_parts(style, started, reasoning_model):
    engine = started(style)
    deltas, done = ask(engine, 0, [{"role": "user", "content": "Where is Paris?"}])
    assert done.reason == "stop"
    assert joined(deltas, "reasoning") == done.reasoning == REASONING
    assert joined(deltas, "answer") == done.text == ANSWER
    assert not any("<" in d.text for d in deltas), "a marker leaked into the text"
    assert done.stats.reasoning_tokens == reply_tokens(reasoning_model(style), "reasoning")
    assert done.stats.reasoning_s >= 0.0
    # Reasoning comes first, then the answer: the parts never interleave.
    parts = [d.part for d in deltas]
    assert parts == sorted(parts, key=lambda p: p != "reasoning")


@pytest.mark.parametrize("style", STYLES)
def test_the_budget_ends_reasoning_at_exactly_n_tokens_then_the_answer_follows(style, started):
    """Two slots decode together with different budgets (the pipelined decode feeds the end marker in place
    of the model's token), and a budget of 0 ends reasoning before it starts."""
    engine = started(style, parallel=3)
    chat = [{"role": "user", "content": "Where is Paris?"}]
    handles = {
        n: engine.submit(slot, chat, sampling=SamplingParams(max_tokens=64, reasoning_budget=n))
        for slot, n in enumerate((0, 2, 5))
    }
    words = REASONING.split(" ")
    for n, handle in handles.items():
        done = handle.result(60)
        assert done.stats.reasoning_tokens == n, n
        assert done.reasoning == " ".join(words[:n]), n  # each word of the script is one token
        assert done.text.strip() == ANSWER.strip(), n


def test_thinking_off_gives_the_answer_alone(started):
    engine = started("switch")
    deltas, done = ask(engine, 0, [{"role": "user", "content": "Where is Paris?"}], SamplingParams(max_tokens=64,
                                                                                                   thinking=False))
    assert {d.part for d in deltas} == {"answer"}
    assert done.reasoning == "" and done.stats.reasoning_tokens == 0
    assert done.text.strip() == ANSWER.strip()


@pytest.mark.parametrize("keep", [False, True])
def test_the_next_turn_sends_answers_only_unless_reasoning_is_kept_and_the_slot_keeps_the_shared_prefix(
    keep, started
):
    """The slot holds the reply with its reasoning; the next turn's prompt holds the answer alone (or, kept,
    the reasoning too, in the template's markers). The slot keeps what the two share: the first turn's
    prompt at least, and all of the reply when the reasoning is sent back as it was written."""
    engine = started("switch")
    first = [{"role": "user", "content": "Where is Paris?"}]
    _, done = ask(engine, 0, first)
    reply = {"role": "assistant", "content": done.text} | ({"reasoning_content": done.reasoning} if keep else {})
    second = [*first, reply, {"role": "user", "content": "And Rome?"}]
    tokenizer = engine.core.tokenizer
    prompt = tokenizer.decode(render(tokenizer, second))
    assert (REASONING in prompt) is keep
    assert ANSWER in prompt
    _, again = ask(engine, 0, second)
    assert again.text == ANSWER
    first_prompt = len(render(tokenizer, first))
    assert again.stats.cached_tokens >= first_prompt
    assert (again.stats.cached_tokens >= first_prompt + done.stats.generated_tokens - 1) is keep


def test_with_the_split_off_the_reply_is_the_models_text_whole(started):
    """The bench's reference (mlxchat-unsplit): nothing scanned, the markers left in the answer."""
    engine = started("switch")
    engine.call(lambda: engine.core.replies.scan(False)).result(30)
    deltas, done = ask(engine, 0, [{"role": "user", "content": "Where is Paris?"}])
    assert {d.part for d in deltas} == {"answer"} and done.reasoning == ""
    assert done.text == f"<think>{REASONING}</think>{ANSWER}"

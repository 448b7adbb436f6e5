"""The slot scheduler on its own: no thread, stepped by the test, as mlx-lm's BatchGenerator is."""

from __future__ import annotations

from mlxchat.engine.events import Done, SamplingParams, TextDelta
from mlxchat.engine.handle import RequestHandle, Submit
from mlxchat.engine.scheduler import SlotScheduler
from tests.engine.test_families import PROMPTS, alone, plan, tokenizer  # noqa: F401 (the fixture)
from tests.tiny_families import build_family

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


def test_admitted_requests_step_to_their_ends_each_as_mlx_lm_alone(tokenizer) -> None:
    model = build_family("llama")
    core = SlotScheduler(model, tokenizer, plan(), prefill_chunk=4)
    handles = [RequestHandle(i + 1, i) for i in range(3)]
    for handle, prompt in zip(handles, PROMPTS):
        core.admit(Submit(handle, tokens=prompt, sampling=GREEDY))
    assert [s.state for s in core.snapshot().slots[:3]] == ["prefill"] * 3
    steps = 0
    while core.busy:
        core.step()
        steps += 1
    # 4-token chunks: the 21-token prompt's 6th prefill step gives its first token, then one token a step
    # (the last pass read one step later).
    assert 6 + GREEDY.max_tokens - 1 <= steps <= 6 + GREEDY.max_tokens + 1
    for handle, prompt in zip(handles, PROMPTS):
        events = list(handle.events(timeout=0))
        assert isinstance(events[-1], Done) and events[-1].reason == "length"
        assert sum(e.tokens for e in events if isinstance(e, TextDelta)) == GREEDY.max_tokens
        assert core.slots[handle.slot_id].history[len(prompt) :] == alone(model, prompt, GREEDY.max_tokens)[:-1]


def test_a_request_for_a_busy_slot_is_refused_at_once(tokenizer) -> None:
    core = SlotScheduler(build_family("llama"), tokenizer, plan())
    core.admit(Submit(RequestHandle(1, 0), tokens=PROMPTS[0], sampling=GREEDY))
    second = RequestHandle(2, 0)
    core.admit(Submit(second, tokens=PROMPTS[1], sampling=GREEDY))
    done = second.result(timeout=0)
    assert done.refused and "still answering" in (done.error or "")

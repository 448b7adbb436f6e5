"""The slot scheduler on its own: no thread, stepped by the test, as mlx-lm's BatchGenerator is."""

from __future__ import annotations

import mlx.core as mx

from mlxchat.engine.events import Done, SamplingParams, TextDelta
from mlxchat.engine.handle import RequestHandle
from mlxchat.engine.prefill.policy import prefill_budget
from mlxchat.engine.requests import Submit
from mlxchat.engine.scheduler import SlotScheduler
from mlxchat.engine.loading.batch_check import ready_for_slots
from tests.engine.test_families import PROMPTS, alone, plan, tokenizer  # noqa: F401 (the fixture)
from tests.tiny_families import build_family

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


def admitted(core: SlotScheduler, prompts: list[list[int]]) -> list[RequestHandle]:
    """Each prompt admitted on its own slot (0, 1, ...), greedy; their handles."""
    handles = [RequestHandle(i + 1, i) for i in range(len(prompts))]
    for handle, prompt in zip(handles, prompts):
        core.admit(Submit(handle, tokens=prompt, sampling=GREEDY))
    return handles


def ends_each_as_alone(core: SlotScheduler, model, handles: list[RequestHandle], prompts: list[list[int]]) -> None:
    """Steps the scheduler to its end; each slot then holds its prompt and the reply mlx-lm gives it alone."""
    while core.busy:
        core.step()
    for handle, prompt in zip(handles, prompts):
        assert core.slots[handle.slot_id].history[len(prompt) :] == alone(model, prompt, GREEDY.max_tokens)[:-1]


def test_admitted_requests_step_to_their_ends_each_as_mlx_lm_alone(tokenizer) -> None:
    model = build_family("llama")
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(), prefill_chunk=4)
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


def test_a_burst_of_prompts_with_nothing_streaming_is_read_in_one_pass(tokenizer) -> None:
    # Eight chats asking at once (the bench's short scenario): a pass of every prompt reads faster than
    # a few prompts first and the rest paced beside their streams, and no first token comes later.
    model = build_family("llama")
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(parallel=8, ctx_size=8 * 256))
    prompts = [[(11 * i + j) % 250 + 1 for j in range(128 - i)] for i in range(8)]
    handles = admitted(core, prompts)
    core.step()
    assert [s.state for s in core.snapshot().slots] == ["decoding"] * 8
    ends_each_as_alone(core, model, handles, prompts)


def test_a_burst_too_big_for_one_pass_is_read_before_any_reply_goes_on(tokenizer) -> None:
    # Eight chats asking at once: 1.6 times the device's prefill budget (1,024 tokens on a CPU, 4,096 on a GPU), two
    # passes. The first pass's chats get their first tokens and wait for the second pass (the rest used to be read
    # in small chunks beside their replies, the last first token seconds later).
    model = build_family("llama")
    budget = prefill_budget()  # (each prompt in one chunk: a chunk and a slot hold a quarter of it)
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(parallel=8, ctx_size=2 * budget), prefill_chunk=budget // 4)
    prompts = [[(7 * i + j) % 250 + 1 for j in range(budget // 5)] for i in range(8)]
    handles = admitted(core, prompts)
    core.step()
    first = [s for s in core.slots if s.request and not s.request.pending]
    assert 0 < len(first) < 8 and all(s.request.generated == 1 for s in first)  # type: ignore[union-attr]
    core.step()
    # The rest in the second pass, whole; the first ones' replies go on in that step's decode pass.
    assert all(s.request and not s.request.pending and s.request.generated >= 1 for s in core.slots)
    ends_each_as_alone(core, model, handles, prompts)


def test_prompts_that_come_while_a_reply_goes_on_do_not_hold_it_back(tokenizer) -> None:
    model = build_family("llama")
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(parallel=4, ctx_size=4 * 256))
    core.admit(Submit(RequestHandle(1, 0), tokens=PROMPTS[0], sampling=SamplingParams(max_tokens=50)))
    while not (core.slots[0].request and core.slots[0].request.generated >= 2):
        core.step()
    for slot in (1, 2, 3):
        core.admit(Submit(RequestHandle(slot + 1, slot), tokens=PROMPTS[slot % len(PROMPTS)], sampling=GREEDY))
    before = core.slots[0].request.generated
    core.step()
    assert core.slots[0].request.generated > before  # (its tokens and the prompts' chunks share the pass)


def test_a_request_for_a_busy_slot_is_refused_at_once(tokenizer) -> None:
    core = SlotScheduler(ready_for_slots(build_family("llama"), tokenizer), plan())
    core.admit(Submit(RequestHandle(1, 0), tokens=PROMPTS[0], sampling=GREEDY))
    second = RequestHandle(2, 0)
    core.admit(Submit(second, tokens=PROMPTS[1], sampling=GREEDY))
    done = second.result(timeout=0)
    assert done.refused and "still answering" in (done.error or "")


def test_a_prompt_arriving_while_slots_stream_shares_their_passes_and_everything_equals_mlx_lm_alone(
    tokenizer,
) -> None:
    model = build_family("llama")
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(ctx_size=4 * 256), prefill_chunk=16)
    # llama on the CPU: decode rows and a prompt chunk share each matmul (elsewhere a chunk has its own pass).
    assert core.forward.mixes == (mx.default_device().type == mx.cpu)
    streams = [RequestHandle(i + 1, i) for i in range(2)]
    long = [(5 * j) % 250 + 1 for j in range(90)]
    # The streams outlast the prompt: how many steps it takes depends on measured costs (steps owed to the streams
    # read none), and 30 tokens ran out before it once on a loaded machine.
    reply = SamplingParams(max_tokens=200, ignore_eos=True)
    for handle, prompt in zip(streams, PROMPTS):
        core.admit(Submit(handle, tokens=prompt, sampling=reply))
    while any(s.request and s.request.pending for s in core.slots):
        core.step()
    for _ in range(3):
        core.step()  # both stream: decode steps alone, which the costs measure
    late = RequestHandle(9, 2)
    core.admit(Submit(late, tokens=long, sampling=GREEDY))
    tokens_per_step = []
    while core.slots[2].request and core.slots[2].request.pending:
        before = [len(core.slots[i].history) for i in range(2)]
        core.step()
        tokens_per_step.append([len(core.slots[i].history) - b for i, b in enumerate(before)])
    # Every step that read the long prompt also gave each stream its next token (the last one also
    # dispatched the next decode pass, whose input the streams' histories hold at once).
    assert all(grown == [1, 1] for grown in tokens_per_step[:-1]), " ".join(map(str, tokens_per_step))
    # (where a chunk shares the decode pass, the last one also dispatched the next: the streams hold two more)
    assert tokens_per_step[-1] == ([2, 2] if core.forward.mixes else [1, 1])
    # 90 tokens in chunks of at most 16 while the others stream.
    assert len(tokens_per_step) >= 90 // 16
    while core.busy:
        core.step()
    for handle, prompt in zip(streams, PROMPTS):
        assert core.slots[handle.slot_id].history[len(prompt) :] == alone(model, prompt, reply.max_tokens)[:-1]
    assert core.slots[2].history[len(long) :] == alone(model, long, GREEDY.max_tokens)[:-1]


def test_prompts_read_beside_a_stream_take_turns_so_a_long_one_does_not_starve_a_short_one(tokenizer) -> None:
    # While a slot streams, a pass reads one prompt's chunk: the prompts waiting take turns, pass after pass. A long
    # prompt in a lower slot must not be read whole before a short one that came with it gets a chunk.
    model = build_family("llama")
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(parallel=3, ctx_size=3 * 256), prefill_chunk=16)
    streaming = SamplingParams(max_tokens=200, ignore_eos=True)
    core.admit(Submit(RequestHandle(1, 0), tokens=PROMPTS[0], sampling=streaming))
    while not (core.slots[0].request and core.slots[0].request.generated >= 2):
        core.step()
    long, short = [(5 * j) % 250 + 1 for j in range(160)], PROMPTS[1]  # 160 tokens: ten chunks or more; 13: one
    core.admit(Submit(RequestHandle(2, 1), tokens=long, sampling=GREEDY))
    core.admit(Submit(RequestHandle(3, 2), tokens=short, sampling=GREEDY))
    def left() -> list[int]:
        return [len(r.pending) if (r := core.slots[i].request) else 0 for i in (1, 2)]

    passes = 0  # that read a chunk (a step owed to the stream reads none: engine.prefill.pacing)
    while core.slots[2].request and core.slots[2].request.pending:
        before = left()
        core.step()
        passes += before != left()
    # Chunks of 8 to 16 tokens (the streaming pace's bounds): the short prompt is read within its first two turns.
    assert passes <= 4 and len(core.slots[1].request.pending) >= 160 - 2 * 16  # type: ignore[union-attr]
    while core.busy:
        core.step()
    assert core.slots[2].history[len(short) :] == alone(model, short, GREEDY.max_tokens)[:-1]


def test_steps_owed_to_the_streams_read_no_prompt_and_the_prompt_goes_on_after(tokenizer) -> None:
    # A chunk that cost more than prefill_stall allows is paid back by steps of the streams alone (engine.prefill.pacing).
    core = SlotScheduler(ready_for_slots(build_family("llama"), tokenizer), plan(), prefill_chunk=16)
    core.admit(Submit(RequestHandle(1, 0), tokens=PROMPTS[0], sampling=SamplingParams(max_tokens=60, ignore_eos=True)))
    while not (core.slots[0].request and core.slots[0].request.generated >= 2):
        core.step()
    core.admit(Submit(RequestHandle(2, 1), tokens=[(5 * j) % 250 + 1 for j in range(40)], sampling=GREEDY))
    late = core.slots[1].request
    assert late is not None
    core.costs.owed_s = 1e9
    for _ in range(3):
        streamed = len(core.slots[0].history)
        core.step()
        assert len(late.pending) == 40 and len(core.slots[0].history) == streamed + 1
    core.costs.owed_s = 0.0
    core.step()
    assert len(late.pending) < 40


def test_a_snapshot_taken_while_the_slots_are_repartitioned_reads_the_new_plan(tokenizer, monkeypatch) -> None:
    # The UI's status clock reads snapshots from its own thread; the old store lets its layers go one at a time (an
    # F2 apply once crashed the app: a snapshot met a layer already gone).
    core = SlotScheduler(ready_for_slots(build_family("llama"), tokenizer), plan(parallel=2, ctx_size=2 * 512))
    core.admit(Submit(RequestHandle(1, 0), tokens=PROMPTS[0], sampling=GREEDY))
    while core.busy:
        core.step()
    layer_type = type(core.store.layers[0])
    copy_slot, seen = layer_type.copy_slot, []

    def copy_and_look(self, *args, **kwargs):  # (each layer, as the UI's clock might read between two)
        seen.append(core.snapshot())
        return copy_slot(self, *args, **kwargs)

    monkeypatch.setattr(layer_type, "copy_slot", copy_and_look)
    core.repartition(plan(parallel=4, ctx_size=4 * 512))
    assert len(seen) == len(core.store.layers) >= 2
    assert all(len(snapshot.slots) == 4 and snapshot.per_slot == 512 for snapshot in seen)
    assert core.snapshot().slots[0].used == len(core.slots[0].history) > 0


def test_a_repartition_does_not_hold_both_plans_kv_at_once(tokenizer) -> None:
    # Eight layers, four slots each holding a conversation, rebuilt (the same plan: every slot's KV survives). Each
    # old layer goes once copied: the peak stays near one store and one layer, not two stores (as it was).
    model = build_family("llama", num_hidden_layers=8)
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(parallel=4, ctx_size=4 * 512))
    for slot in range(4):
        core.admit(Submit(RequestHandle(slot + 1, slot), tokens=PROMPTS[slot % len(PROMPTS)], sampling=GREEDY))
    while core.busy:
        core.step()
    held = [list(s.history) for s in core.slots]
    kv = core.store.nbytes
    mx.eval(core.store.arrays)
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    survived = core.repartition(plan(parallel=4, ctx_size=4 * 512))
    assert survived == {0: True, 1: True, 2: True, 3: True} and [s.history for s in core.slots] == held
    assert mx.get_peak_memory() - before < kv * 0.5  # one store (the old one, going) and one layer, not two stores

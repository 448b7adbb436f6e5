"""Speculative decoding (engine.speculation) changes no token: replies with drafts checked in the batched pass equal
the replies without, greedy and seeded, in busy slots; the K/V of rejected drafts is dropped exactly."""

from __future__ import annotations

import dataclasses

from mlxchat.engine.events import Done, SamplingParams
from mlxchat.engine.handle import RequestHandle
from mlxchat.engine.requests import Submit
from mlxchat.engine.scheduler import SlotScheduler
from mlxchat.engine.speculation.acceptance import DraftState, accepted, worth
from mlxchat.engine.speculation.lookup import NgramLookup
from mlxchat.engine.loading.batch_check import ready_for_slots
from tests.engine.test_families import alone, plan, tokenizer  # noqa: F401 (the fixture)
from tests.markers import needs_default_model
from tests.tiny_families import build_family

# Prompts that repeat runs of themselves, so that lookup finds drafts; the tiny models' replies cycle (sampled: at a low
# temperature, their random weights give flat distributions).
PROMPTS = [[(5 * i + j % 7) % 250 + 1 for j in range(n)] for i, n in enumerate((9, 23, 40))]
GREEDY = SamplingParams(max_tokens=40, ignore_eos=True)
SEEDED = SamplingParams(temperature=0.1, top_p=0.95, top_k=20, seed=7, max_tokens=40, ignore_eos=True)


def answered(core: SlotScheduler, prompts: list[list[int]], sampling: SamplingParams | list[SamplingParams]
             ) -> tuple[list, list]:
    """Each prompt answered in its own slot, all at once (with its own sampling where a list gives one each): the
    tokens each slot then holds after its prompt, and each reply's stats."""
    handles = [RequestHandle(i + 1, i) for i in range(len(prompts))]
    samplings = sampling if isinstance(sampling, list) else [sampling] * len(prompts)
    for handle, prompt, each in zip(handles, prompts, samplings, strict=True):
        core.admit(Submit(handle, tokens=prompt, sampling=each))
    while core.busy:
        core.step()
    stats = []
    for handle in handles:
        done = [e for e in handle.events(timeout=0) if isinstance(e, Done)]
        assert done and done[-1].error is None, done
        stats.append(done[-1].stats)
    return [core.slots[h.slot_id].history[len(p) :] for h, p in zip(handles, prompts)], stats


def replies(core: SlotScheduler, prompts: list[list[int]], sampling: SamplingParams) -> list[list[int]]:
    """`answered`'s tokens; where the replies draft, some of their drafts must have been accepted (and some not)."""
    tokens, stats = answered(core, prompts, sampling)
    if sampling.speculative != "off":
        assert sum(s.accepted_tokens for s in stats) > 0
        assert sum(s.drafted_tokens - s.accepted_tokens for s in stats) > 0
    return tokens


def both_ways(family: str, tokenizer, sampling: SamplingParams, **kw) -> tuple[list, list, SlotScheduler]:
    model = build_family(family)
    plain = replies(SlotScheduler(ready_for_slots(model, tokenizer), plan(), **kw), PROMPTS, sampling)
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(), **kw)
    drafted = replies(core, PROMPTS, dataclasses.replace(sampling, speculative="lookup"))
    return plain, drafted, core


def test_lookup_proposes_what_followed_the_latest_earlier_occurrence() -> None:
    lookup = NgramLookup()
    tokens = [1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 7, 2, 3, 4]
    assert lookup.propose(tokens, 3) == [6, 7, 2]  # (the latest "2 3 4" before the end, not the first)
    tokens.append(6)
    assert lookup.propose(tokens, 2) == [7, 2]
    assert NgramLookup().propose([1, 2, 3, 4], 4) == []


def test_only_the_prefix_the_model_chose_is_accepted_and_the_draft_length_follows_what_was_taken() -> None:
    assert accepted([5, 6, 7], [5, 6, 8, 1]) == 2
    assert accepted([5, 6, 7], [4, 6, 7, 1]) == 0
    # A drafted token pays for its row where it is taken with a chance of at least 0.3 x slots / (1 + 0.3 x slots).
    assert (round(worth(1), 3), round(worth(8), 3)) == (0.231, 0.706)
    state = DraftState()  # 2 taken of 3 tried: each token taken with a chance of 2/3, two tokens 4/9, three 8/27...
    assert state.length(0.3, 0) == 2
    state.record(8, 8, 10)  # 0.8 x 2 + 8 = 9.6 taken, of 0.8 x 3 + 8 = 10.4 tried
    assert state.rate == 9.6 / 10.4 and state.length(0.5, 10) == 8  # (0.923 ** 8 = 0.53, ** 9 = 0.49)
    state.record(4, 0, 20)
    state.record(4, 0, 21)
    assert state.draft([1, 2, 3, 1, 2, 3], 22, 8) == []  # two misses in a row: a pause
    assert state.draft([1, 2, 3, 1, 2, 3], 25, 8) == [1, 2, 3]  # (for 4 tokens)


def test_a_reply_whose_drafts_no_longer_pay_pauses_then_starts_again_from_the_first_estimate() -> None:
    """Only checked drafts move the estimate: a reply below the bar that kept it would never draft again (a seeded edit
    reply that left the text for a few tokens drafted nothing more in 200 tokens that repeated its own lines)."""
    state = DraftState()
    state.record(4, 1, 10)  # 0.8 x 2 + 1 = 2.6 taken, of 0.8 x 3 + 2 = 4.4 tried
    state.record(4, 1, 11)  # 0.8 x 2.6 + 1 = 3.08 taken, of 0.8 x 4.4 + 2 = 5.52 tried: 0.56 each
    assert state.length(0.6, 12) == 0  # not even one pays: a pause of 4 tokens...
    assert state.length(0.3, 15) == 0 and state.draft([1, 2, 3, 1, 2, 3], 15, 8) == []
    assert state.rate == 2 / 3 and state.length(0.3, 16) == 2  # ...then 2 of 3 again, as a new reply starts
    # Eight slots' bar (0.71) is above the first estimate: no draft, and no pause either, so that the reply drafts
    # in the first pass with fewer slots.
    assert state.length(0.71, 17) == 0 and state.length(0.3, 18) == 2
    state.record(4, 1, 18)
    state.record(4, 1, 19)
    # Below the first estimate again: a pause of 4 tokens again (drafts taken since the last one end the doubling).
    assert state.length(0.6, 20) == 0 and state.length(0.3, 23) == 0 and state.length(0.3, 24) == 2


def test_greedy_replies_with_drafts_equal_replies_without_in_busy_slots(tokenizer) -> None:
    plain, drafted, _ = both_ways("llama", tokenizer, GREEDY)
    assert drafted == plain == [alone(build_family("llama"), p, GREEDY.max_tokens)[:-1] for p in PROMPTS]


def test_seeded_replies_with_drafts_equal_replies_without_in_busy_slots(tokenizer) -> None:
    plain, drafted, _ = both_ways("llama", tokenizer, SEEDED)
    assert drafted == plain


def test_a_turn_after_dropped_drafts_reads_on_from_where_they_were_dropped_in_chunks(tokenizer) -> None:
    """The K/V past a slot's end after rejected drafts is stale; the next turn's prompt, read in 4-token chunks from that
    point (not a chunk boundary of the first prompt's), overwrites it and gets mlx-lm's reply alone."""
    model = build_family("llama")
    core = SlotScheduler(ready_for_slots(model, tokenizer), plan(), prefill_chunk=4)
    lookup = dataclasses.replace(GREEDY, speculative="lookup")
    first = replies(core, PROMPTS[2:], lookup)[0]
    turn = PROMPTS[2] + first + [9, 8, 7, 6, 5, 4, 3]
    assert len(PROMPTS[2] + first) % 4 and core.store.lengths[0] == len(PROMPTS[2] + first)
    handle = RequestHandle(9, 0)
    core.admit(Submit(handle, tokens=turn, sampling=lookup))
    assert core.slots[0].request.cached == len(PROMPTS[2] + first)  # type: ignore[union-attr]
    while core.busy:
        core.step()
    assert core.slots[0].history[len(turn) :] == alone(model, turn, GREEDY.max_tokens)[:-1]


@needs_default_model
def test_on_the_default_model_a_checked_draft_gets_the_bits_single_steps_get_and_replies_do_not_change() -> None:
    """SmolLM2 as the app holds it (its quantized layers through the compiled kernels): seven tokens checked as one
    chunk beside two other slots' decode rows give, bit for bit, the logits of seven single steps; and replies to the
    edit task with lookup drafts equal the replies without, greedy and seeded."""
    import mlx.core as mx

    from mlxchat.app.paths import models_cache_dir
    from mlxchat.engine.bench.speculative_scenario import SEEDED as BENCH_SEEDED
    from mlxchat.engine.bench.speculative_scenario import CHANGES, edit_chat
    from mlxchat.engine.loading.models import LoadOptions, load_model
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.plan import SlotRequest

    loaded = load_model(None, LoadOptions("auto", cache_dir=models_cache_dir()))
    plan_ = loaded.facts.evaluate(SlotRequest(parallel=4, ctx_size=8192))
    core = SlotScheduler(loaded.ready, plan_)
    store, forward = core.store, core.forward
    text = loaded.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 8)
    for slot in range(3):
        forward.states(mx.array([text[: 60 + slot]]), store.batch([slot], 60 + slot))
        mx.eval(store.arrays)
        store.commit([slot], [60 + slot])
    tokens, singles = text[60:67], []
    for token in tokens:
        (logits,) = forward.every_logits([(mx.array([[token], [5], [6]]), store.batch([0, 1, 2], 1))])
        mx.eval(logits, store.arrays)
        singles.append(logits[0, 0])
        store.commit([0], [1])
    store.rollback(0, 60)
    decode = (mx.array([[5], [6]]), store.batch([1, 2], 1))
    _, chunk = forward.every_logits([decode, (mx.array([tokens]), store.batch([0], len(tokens), per_token=True))])
    mx.eval(chunk)
    assert all(mx.array_equal(chunk[0, i], single).item() for i, single in enumerate(singles))

    engine = Engine(loaded.ready, plan_)
    try:
        # The edit task's prompt (about 1,050 tokens) read once: each later reply rolls the slot back to its end.
        for sampling in (SamplingParams(max_tokens=96), dataclasses.replace(BENCH_SEEDED, max_tokens=96)):
            done = {}
            for mode in ("off", "lookup"):
                done[mode] = engine.submit(0, edit_chat(CHANGES[0]), sampling=dataclasses.replace(
                    sampling, speculative=mode)).result(600)
            assert done["lookup"].text == done["off"].text and done["lookup"].stats.accepted_tokens > 0
            assert done["lookup"].stats.cached_tokens > 1000
    finally:
        engine.shutdown()

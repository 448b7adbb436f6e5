"""Parked KV: a chat that lost its slot comes back without a prefill, exactly; the budget, LRU eviction; forks.

Tiny random-weight models (tests/tiny_families.py): plain llama, a sliding-window family, a
recurrent one and a composite one, greedy, checked token for token against mlx-lm alone.
"""

from __future__ import annotations

import pytest

from mlxchat.engine.events import SamplingParams
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.loading.batch_check import ready_for_slots
from tests.engine.test_families import NEW, PROMPTS, alone, generated, plan
from tests.tiny_families import build_family

GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)
# Two chats with nothing in common, long enough to run past the 8-token windows.
CHAT_A = PROMPTS[3]
CHAT_B = [(11 * j) % 200 + 40 for j in range(30)]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from mlx_lm.utils import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def engines():
    made: list[Engine] = []
    yield made
    for engine in made:
        engine.shutdown()


def start(engines: list[Engine], model, tokenizer, parallel: int = 1, **kwargs) -> Engine:
    engine = Engine(ready_for_slots(model, tokenizer), plan(parallel=parallel), **kwargs)
    engines.append(engine)
    return engine


def turn2(model, prompt: list[int]) -> list[int]:
    """The chat's next prompt: its first prompt, its reply and three new tokens."""
    return prompt + alone(model, prompt) + [5, 6, 7]


def stored(prompt: list[int]) -> int:
    """Tokens a slot holds after a greedy turn on `prompt` (the last sampled token is never fed)."""
    return len(prompt) + NEW - 1


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "mamba2", "falcon_h1"])
def test_parked_chat_returns_with_the_tokens_it_would_have_got(family, tokenizer, engines):
    """Chat A loses the only slot to chat B (cleared, as the session does), comes back: its KV comes
    from the parked store, only its new tokens are prefilled, and it says what mlx-lm alone says."""
    model = build_family(family)
    engine = start(engines, model, tokenizer)
    engine.bind(0, "A")
    engine.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    engine.clear(0)
    engine.bind(0, "B")
    engine.submit(0, tokens=CHAT_B, sampling=GREEDY).result(60)
    parked = engine.snapshot().parked
    assert [(p.label, p.tokens) for p in parked] == [("A", stored(CHAT_A))]
    assert parked[0].nbytes > 0

    again = turn2(model, CHAT_A)
    done = engine.submit(0, tokens=again, sampling=GREEDY).result(60)
    assert done.stats.restored_from == "parked"
    assert done.stats.cached_tokens == stored(CHAT_A)
    assert done.stats.prefilled_tokens == len(again) - stored(CHAT_A) == 4
    assert done.stats.lost is None
    assert generated(engine, 0, again) == alone(model, again)[:-1]
    # B, which the submit took the slot from without a clear, was parked in its turn.
    assert [(p.label, p.tokens) for p in engine.snapshot().parked] == [("B", stored(CHAT_B))]


def test_parked_entries_past_the_budget_go_least_recently_used_first(tokenizer, engines):
    model = build_family("llama")
    probe = start(engines, model, tokenizer)
    probe.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    per_token = probe.snapshot().slots[0].kv_bytes_used // stored(CHAT_A)
    # Room for two parked chats of these lengths, not three.
    chats = {name: [(k * j + 5 * k) % 200 + 20 for j in range(30)] for k, name in enumerate("ABCD", 3)}
    engine = start(engines, model, tokenizer, park_budget_bytes=per_token * stored(chats["A"]) * 5 // 2)
    for name, prompt in chats.items():
        handle = engine.submit(0, tokens=prompt, sampling=GREEDY)  # parks the slot's chat, under its name
        engine.bind(0, name)
        handle.result(60)
    # D holds the slot; A, parked first, was evicted when C was parked.
    assert [p.label for p in engine.snapshot().parked] == ["C", "B"]

    back = engine.submit(0, tokens=turn2(model, chats["A"]), sampling=GREEDY).result(60)
    assert back.stats.restored_from is None and back.stats.cached_tokens == 0
    assert "evicted" in back.stats.lost
    # D, which the slot held, is parked now, and B (the oldest) made room for it.
    assert [p.label for p in engine.snapshot().parked] == ["D", "C"]
    c = turn2(model, chats["C"])
    done = engine.submit(0, tokens=c, sampling=GREEDY).result(60)
    assert (done.stats.restored_from, done.stats.cached_tokens) == ("parked", stored(chats["C"]))
    assert generated(engine, 0, c) == alone(model, c)[:-1]


def test_a_budget_of_zero_parks_nothing_and_says_so(tokenizer, engines):
    model = build_family("llama")
    engine = start(engines, model, tokenizer, park_budget_bytes=0)
    engine.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    engine.clear(0)
    engine.submit(0, tokens=CHAT_B, sampling=GREEDY).result(60)
    assert engine.snapshot().parked == ()
    again = turn2(model, CHAT_A)
    done = engine.submit(0, tokens=again, sampling=GREEDY).result(60)
    assert (done.stats.restored_from, done.stats.cached_tokens) == (None, 0)
    assert done.stats.prefilled_tokens == len(again)
    assert "parking is off" in done.stats.lost
    assert generated(engine, 0, again) == alone(model, again)[:-1]
    # B was dropped in its turn; a new chat that only shares B's opening is not told B's story.
    engine.clear(0)
    stranger = engine.submit(0, tokens=CHAT_B[:12] + [3, 2, 1], sampling=GREEDY).result(60)
    assert (stranger.stats.cached_tokens, stranger.stats.lost) == (0, None)


@pytest.mark.parametrize("family", ["llama", "mamba2"])
def test_a_fork_copies_the_shared_prefix_from_the_slot_that_holds_it(family, tokenizer, engines):
    """A new chat on slot 1 that starts with slot 0's history gets that KV copied (slot 0 keeps it)."""
    model = build_family(family)
    engine = start(engines, model, tokenizer, parallel=2)
    engine.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    fork = turn2(model, CHAT_A)
    done = engine.submit(1, tokens=fork, sampling=GREEDY).result(60)
    assert (done.stats.restored_from, done.stats.cached_tokens) == ("slot 0", stored(CHAT_A))
    assert done.stats.prefilled_tokens == 4
    assert generated(engine, 1, fork) == alone(model, fork)[:-1]
    # The original goes on from its own slot, untouched by the copy (a turn the fork does not share).
    own = CHAT_A + alone(model, CHAT_A)[:-1] + [9, 8]
    mine = engine.submit(0, tokens=own, sampling=GREEDY).result(60)
    assert (mine.stats.restored_from, mine.stats.cached_tokens) == (None, stored(CHAT_A))
    assert generated(engine, 0, own) == alone(model, own)[:-1]


def test_a_fork_at_an_earlier_message_takes_the_common_prefix_from_the_parked_store(tokenizer, engines):
    """Full attention can use any common prefix: a branch that keeps less than half of a parked chat
    gets that much of its KV copied, and the parked entry stays for the chat itself."""
    model = build_family("llama")
    engine = start(engines, model, tokenizer)
    engine.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    engine.clear(0)
    branch = CHAT_A[:20] + [1, 2, 3]
    done = engine.submit(0, tokens=branch, sampling=GREEDY).result(60)
    assert (done.stats.restored_from, done.stats.cached_tokens) == ("parked", 20)
    assert generated(engine, 0, branch) == alone(model, branch)[:-1]
    assert [p.tokens for p in engine.snapshot().parked] == [stored(CHAT_A)]
    # The chat itself comes back: all of its KV, and the branch is parked in its turn.
    again = turn2(model, CHAT_A)
    back = engine.submit(0, tokens=again, sampling=GREEDY).result(60)
    assert (back.stats.restored_from, back.stats.cached_tokens) == ("parked", stored(CHAT_A))
    assert generated(engine, 0, again) == alone(model, again)[:-1]
    assert [p.tokens for p in engine.snapshot().parked] == [len(branch) + NEW - 1]

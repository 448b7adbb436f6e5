"""`mlxchat bench --scenario return`: time to first token of a chat that comes back after lending its slot.

More chats than slots, each with a long history, take turns, as a user going from chat to chat
does: each turn finds its slot held by another chat. With the parked store the chat's KV comes
back and only its new message is prefilled; with the store off (budget 0) its whole history is
prefilled again. Both run the same turns on the same engine settings.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlxchat.engine.bench.report import aligned
from mlxchat.engine.bench.workloads import CONTEXT, CTX_ROUNDING, QUESTIONS, SYSTEM_PROMPT
from mlxchat.engine.memory import DEFAULT_PARK_BUDGET_MB

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

RETURN_SCENARIO = "return"
RETURN_SLOTS = 2
RETURN_NOTES = 12  # notes per chat's opening message: about 1500 tokens with SmolLM2's tokenizer
RETURN_ROUNDS = 3  # turns per chat after its first (the returns measured)
RETURN_TOKENS = 16  # new tokens per reply: the bench times the first one


@dataclass(frozen=True)
class ReturnRecord:
    """TTFT of the returning turns in one mode (medians over every return), with what was prefilled."""

    mode: str
    chats: int
    slots: int
    history_tokens: int  # median prompt length of a returning turn
    returns: int
    ttft_ms_p50: float
    prefilled_p50: int
    cached_p50: int
    first_ttft_ms_p50: float  # each chat's first turn: a full prefill of its opening, the same in both modes
    parked_bytes: int  # what the parked store held at the end


def openings(tokenizer, chats: int, notes: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """Each chat's first prompt: its own numbered notes and a question, with the model's chat template."""
    prompts = []
    for c in range(chats):
        text = "\n\n".join(f"Chat {c + 1}, note {k + 1}. {CONTEXT}" for k in range(notes))
        chat = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{text}\n\n{QUESTIONS[c % len(QUESTIONS)]}"},
        ]
        prompts.append(list(tokenizer.apply_chat_template(chat, add_generation_prompt=True)))
    return prompts


def run_return_bench(
    loaded: LoadedModel,
    *,
    slots: int = RETURN_SLOTS,
    chats: int | None = None,
    notes: int = RETURN_NOTES,
    rounds: int = RETURN_ROUNDS,
    max_tokens: int = RETURN_TOKENS,
    park_budget_mb: int = DEFAULT_PARK_BUDGET_MB,
) -> list[ReturnRecord]:
    """Plays the turns with the parked store (`park_budget_mb`) and without it; one record per mode."""
    chats = chats or 2 * slots
    firsts = openings(loaded.tokenizer, chats, notes)
    question = list(loaded.tokenizer.encode("\n\nAnd then? Say more.", add_special_tokens=False))
    longest = max(len(p) for p in firsts) + rounds * (max_tokens + len(question)) + max_tokens + 1
    per_slot = -(-longest // CTX_ROUNDING) * CTX_ROUNDING
    return [
        _play(loaded, mode, budget, firsts, question, slots, per_slot, rounds, max_tokens)
        for mode, budget in (("parked", park_budget_mb), ("no parking", 0))
    ]


def _play(
    loaded: LoadedModel,
    mode: str,
    budget_mb: int,
    openings: list[list[int]],
    question: list[int],
    slots: int,
    per_slot: int,
    rounds: int,
    max_tokens: int,
) -> ReturnRecord:
    from mlxchat.engine.events import SamplingParams
    from mlxchat.engine.plan import SlotRequest
    from mlxchat.engine.local_engine import Engine

    request = SlotRequest(slots, slots * per_slot, parallel_max=slots, per_slot_floor=0, per_slot_min=per_slot)
    plan = loaded.facts.evaluate(request, capped=False)
    engine = Engine(loaded.ready, plan, park_budget_bytes=budget_mb * 2**20
    )
    sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    try:
        # Warm-up: lazy initialisation and compilation, in a slot every chat's first turn then clears.
        engine.submit(0, tokens=openings[0][:64], sampling=SamplingParams(max_tokens=4)).result()
        engine.clear(0, park=False)
        prompts = [list(p) for p in openings]
        firsts, returns = [], []
        for turn in range(rounds + 1):
            for c, prompt in enumerate(prompts):
                # Chat c sits where the session would lend it a slot: the least recently used one.
                slot = (turn * len(prompts) + c) % slots
                done = engine.submit(slot, tokens=prompt, sampling=sampling).result()
                if done.error:
                    raise RuntimeError(done.error)
                (returns if turn else firsts).append(done.stats)
                reply = engine.call(lambda s=slot, n=len(prompt): list(engine.core.slots[s].history[n:])).result()
                prompt += reply + question
        parked = engine.snapshot().parked_bytes
    finally:
        engine.shutdown()
    return ReturnRecord(
        mode=mode,
        chats=len(openings),
        slots=slots,
        history_tokens=int(statistics.median(s.prompt_tokens for s in returns)),
        returns=len(returns),
        ttft_ms_p50=1000 * statistics.median(s.ttft_s for s in returns),
        prefilled_p50=int(statistics.median(s.prefilled_tokens for s in returns)),
        cached_p50=int(statistics.median(s.cached_tokens for s in returns)),
        first_ttft_ms_p50=1000 * statistics.median(s.ttft_s for s in firsts),
        parked_bytes=parked,
    )


def format_return_table(model: str, device: str, records: list[ReturnRecord]) -> str:
    """The records as an aligned table, with the speed-up of a return over a full prefill."""
    columns = ("mode", "chats", "slots", "history tok", "returns", "TTFT ms", "prefilled tok", "cached tok",
               "1st-turn TTFT ms", "parked MiB")
    rows = [
        (r.mode, str(r.chats), str(r.slots), str(r.history_tokens), str(r.returns), f"{r.ttft_ms_p50:.0f}",
         str(r.prefilled_p50), str(r.cached_p50), f"{r.first_ttft_ms_p50:.0f}", f"{r.parked_bytes / 2**20:.1f}")
        for r in records
    ]
    lines = aligned(columns, rows)
    by_mode = {r.mode: r for r in records}
    footer = []
    if "parked" in by_mode and "no parking" in by_mode and by_mode["parked"].ttft_ms_p50 > 0:
        ratio = by_mode["no parking"].ttft_ms_p50 / by_mode["parked"].ttft_ms_p50
        footer.append(f"a return to a parked chat: first token {ratio:.1f}x sooner than a full prefill (medians)")
    return "\n".join([f"model {model} | device {device} | return to a chat that lent its slot", *lines, *footer])

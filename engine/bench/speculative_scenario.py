"""`mlxchat bench --scenario speculative`: speculative decoding (lookup drafts) against the plain path, run for run.

Three workloads, each played with speculative = "off" and "lookup" in turn on one engine (the order swapped from
round to round, so a machine that slows down mid-run weighs on both alike):

- the edit task: one chat given an attached text of about 1,000 tokens and asked to write it again with a small
  change, greedy and seeded: decode tok/s, and whether the reply is the same;
- plain chat prompts (questions whose answers repeat little): decode tok/s, one chat at a time;
- 8 chats of the edit task at once, each with its own change: their decode tok/s together, every reply the same.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mlxchat.engine.bench.report import aligned
from mlxchat.engine.bench.workloads import CONTEXT, CTX_ROUNDING, QUESTIONS, SYSTEM_PROMPT
from mlxchat.engine.events import SamplingParams

if TYPE_CHECKING:
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.loading.models import LoadedModel

SPECULATIVE_SCENARIO = "speculative"
EDIT_TOKENS = 256  # each reply's tokens (the whole text is longer: a reply is cut there)
PLAIN_TOKENS = 128
CHATS = 8
ROUNDS = 2
SEEDED = SamplingParams(temperature=0.7, top_p=0.95, top_k=40, seed=11)
# Each chat's change to the text: (word in the text, its replacement).
CHANGES = (("Monday", "Tuesday"), ("Friday", "Saturday"), ("team", "group"), ("review", "check"),
           ("Wednesday", "Thursday"), ("vendor", "supplier"), ("tickets", "issues"), ("budget", "plan"))


@dataclass(frozen=True)
class SpeculativeRecord:
    """One workload's runs: median decode tok/s without and with lookup drafts, and what the drafts did."""

    workload: str
    chats: int
    runs: int  # rounds (each a run without and one with)
    plain_tok_s: float
    lookup_tok_s: float
    drafted: int  # over every run with lookup
    accepted: int
    identical: bool  # every reply with lookup equals the reply without, run for run

    @property
    def speedup(self) -> float:
        return self.lookup_tok_s / self.plain_tok_s if self.plain_tok_s else 0.0


def edit_text() -> str:
    """The attached text of the edit task: a team's weekly notes (about 1,000 tokens with SmolLM2's tokenizer)."""
    pick = random.Random(3)
    names = ("Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Julia", "Kenji", "Lena")
    teams = ("storage", "billing", "search", "mobile", "payments", "security", "data", "design", "support", "network")
    things = ("migration", "release", "audit", "backup", "rollout", "review", "launch", "test plan", "budget")
    notes = ["Weekly notes from the platform group."]
    for _ in range(28):
        late = pick.randint(2, 40)
        status = pick.choice(("on track", f"late by {late} days", "blocked on a vendor", "done", "waiting for review"))
        notes.append(f"{pick.choice(names)} from the {pick.choice(teams)} team says the {pick.choice(things)} is "
                     f"{status}; the next check is on {pick.choice(('Monday', 'Wednesday', 'Thursday', 'Friday'))}, "
                     f"and {pick.choice(names)} owns the follow-up with {late} open tickets.")
    return " ".join(notes)


def edit_chat(change: tuple[str, str]) -> list[dict[str, str]]:
    """One chat of the edit task: the notes, and a small change to make while writing them again."""
    old, new = change
    ask = f"Rewrite the following notes, changing every '{old}' to '{new}'. Keep everything else the same."
    return [{"role": "user", "content": f"{ask}\n\n{edit_text()}"}]


def plain_chats() -> list[list[dict[str, str]]]:
    """Chat prompts whose answers repeat little of them: the bench's short questions."""
    return [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"{CONTEXT}\n\n{q}"}]
            for q in QUESTIONS[:4]]


def run_speculative_bench(loaded: LoadedModel, rounds: int = ROUNDS) -> list[SpeculativeRecord]:
    """Every workload, `rounds` times each way, on one engine of CHATS slots."""
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.plan import SlotRequest

    longest = len(loaded.tokenizer.apply_chat_template(edit_chat(CHANGES[0]), add_generation_prompt=True))
    per_slot = -(-(longest + 64 + EDIT_TOKENS) // CTX_ROUNDING) * CTX_ROUNDING
    plan = loaded.facts.evaluate(SlotRequest(CHATS, CHATS * per_slot, parallel_max=CHATS), capped=False)
    engine = Engine(loaded.ready, plan)
    greedy = SamplingParams(max_tokens=EDIT_TOKENS)
    try:
        engine.submit(0, plain_chats()[0], sampling=SamplingParams(max_tokens=8)).result()  # warm-up
        return [
            _compare(engine, "edit task, greedy", [edit_chat(CHANGES[0])], greedy, rounds),
            _compare(engine, "edit task, seeded", [edit_chat(CHANGES[0])], replace(SEEDED, max_tokens=EDIT_TOKENS),
                     rounds),
            _compare(engine, "plain prompts", plain_chats(), SamplingParams(max_tokens=PLAIN_TOKENS), rounds,
                     at_once=False),
            _compare(engine, f"edit task, {CHATS} chats", [edit_chat(c) for c in CHANGES[:CHATS]], greedy, rounds),
        ]
    finally:
        engine.shutdown(timeout=60)


def _compare(engine: Engine, name: str, chats: list[list[dict[str, str]]], sampling: SamplingParams, rounds: int,
             at_once: bool = True) -> SpeculativeRecord:
    """`chats` played without drafts and with, `rounds` times, the order swapped each round."""
    rates: dict[str, list[float]] = {"off": [], "lookup": []}
    texts: dict[str, list[list[str]]] = {"off": [], "lookup": []}
    drafted = accepted = 0
    for r in range(rounds):
        for mode in ("off", "lookup") if r % 2 == 0 else ("lookup", "off"):
            dones = _play(engine, chats, replace(sampling, speculative=mode), at_once)
            # Chats at once: their rates add up (they decode together); one at a time: their mean.
            per_chat = [d.stats.decode_tok_s for d in dones]
            rates[mode].append(sum(per_chat) if at_once else statistics.mean(per_chat))
            texts[mode].append([d.text for d in dones])
            if mode == "lookup":
                drafted += sum(d.stats.drafted_tokens for d in dones)
                accepted += sum(d.stats.accepted_tokens for d in dones)
    return SpeculativeRecord(name, len(chats), rounds, statistics.median(rates["off"]),
                             statistics.median(rates["lookup"]), drafted, accepted, texts["off"] == texts["lookup"])


def _play(engine: Engine, chats: list[list[dict[str, str]]], sampling: SamplingParams, at_once: bool) -> list:
    """Each chat in its own slot (all at once, or one after another), from an empty slot; their Done events."""
    for slot in range(len(chats)):
        engine.clear(slot, park=False)  # (no run reads another's K/V: each prefills its prompt whole)
    if at_once:
        handles = [engine.submit(i, chat, sampling=sampling) for i, chat in enumerate(chats)]
        dones = [h.result() for h in handles]
    else:
        dones = []
        for i, chat in enumerate(chats):
            dones.append(engine.submit(i, chat, sampling=sampling).result())
    failed = [d.error for d in dones if d.error]
    if failed:
        raise RuntimeError(failed[0])
    return dones


def format_speculative_table(model: str, device: str, records: list[SpeculativeRecord]) -> str:
    """The records as an aligned table: each workload's decode tok/s both ways, the ratio, the drafts' fate."""
    columns = ("workload", "chats", "runs", "off tok/s", "lookup tok/s", "x", "drafted", "accepted", "same replies")
    rows = [(r.workload, str(r.chats), str(r.runs), f"{r.plain_tok_s:.1f}", f"{r.lookup_tok_s:.1f}",
             f"{r.speedup:.2f}", str(r.drafted),
             f"{r.accepted} ({100 * r.accepted / r.drafted:.0f}%)" if r.drafted else "0",
             "yes" if r.identical else "NO") for r in records]
    return "\n".join([f"model {model} | device {device} | speculative decoding: lookup drafts against none",
                      *aligned(columns, rows)])

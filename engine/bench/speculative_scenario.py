"""`mlxchat bench --scenario speculative`: speculative decoding (lookup drafts, and a draft model's where
`draft_model` is set) against the plain path, run for run.

Three workloads, each played with speculative = "off", "lookup" (and "draft") in turn on one engine (the order turned
from round to round, so a machine that slows down mid-run weighs on each alike):

- the edit task: one chat given an attached text of about 1,000 tokens and asked to write it again with a small
  change, greedy and seeded: decode tok/s, and whether the reply is the same;
- plain chat prompts (questions whose answers repeat little): decode tok/s, one chat at a time;
- 8 chats of the edit task at once, each with its own change: their decode tok/s together, every reply the same.

With a draft model, the edit task is played once more with its pass taken as free (the cost rule then never stops it),
for its acceptance and its cost: what a pass of it takes against the fixed part of the target's.
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
    from mlxchat.engine.speculation.drafter import DraftModel

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
    """One workload's runs: median decode tok/s without drafts, with lookup's and with a draft model's (0: not run),
    and what the drafts did."""

    workload: str
    chats: int
    runs: int  # rounds (each a run without and one with)
    plain_tok_s: float
    lookup_tok_s: float
    drafted: int  # over every run with lookup
    accepted: int
    identical: bool  # every reply with drafts equals the reply without, run for run
    draft_tok_s: float = 0.0
    draft_drafted: int = 0  # over every run with the draft model
    draft_accepted: int = 0


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


@dataclass(frozen=True)
class DraftCost:
    """What the draft model's passes cost, as the engine measured them (engine.speculation.verify.Verifier)."""

    name: str
    pass_ms: float  # one drafting pass of it
    target_fixed_ms: float  # the fixed part of a target's checking pass (what a pass costs whatever its rows)

    @property
    def ratio(self) -> float:
        return self.pass_ms / self.target_fixed_ms if self.target_fixed_ms else 0.0


def run_speculative_bench(loaded: LoadedModel, rounds: int = ROUNDS, draft: DraftModel | None = None
                          ) -> tuple[list[SpeculativeRecord], DraftCost | None]:
    """Every workload, `rounds` times each way, on one engine of CHATS slots; with `draft`, what its passes cost."""
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.plan import SlotRequest

    longest = len(loaded.tokenizer.apply_chat_template(edit_chat(CHANGES[0]), add_generation_prompt=True))
    per_slot = -(-(longest + 64 + EDIT_TOKENS) // CTX_ROUNDING) * CTX_ROUNDING
    plan = loaded.facts.evaluate(SlotRequest(CHATS, CHATS * per_slot, parallel_max=CHATS), capped=False)
    engine = Engine(loaded.ready, plan, draft=draft)
    greedy = SamplingParams(max_tokens=EDIT_TOKENS)
    modes = ("off", "lookup", "draft") if draft else ("off", "lookup")
    try:
        engine.submit(0, plain_chats()[0], sampling=SamplingParams(max_tokens=8)).result()  # warm-up
        records = [
            _compare(engine, "edit task, greedy", [edit_chat(CHANGES[0])], greedy, rounds, modes),
            _compare(engine, "edit task, seeded", [edit_chat(CHANGES[0])], replace(SEEDED, max_tokens=EDIT_TOKENS),
                     rounds, modes),
            _compare(engine, "plain prompts", plain_chats(), SamplingParams(max_tokens=PLAIN_TOKENS), rounds, modes,
                     at_once=False),
            _compare(engine, f"edit task, {CHATS} chats", [edit_chat(c) for c in CHANGES[:CHATS]], greedy, rounds,
                     modes),
        ]
        if draft is None:
            return records, None
        verifier = engine.core.verifier
        engine.call(lambda: setattr(verifier, "draft_cost", 0.0)).result()
        records.append(_compare(engine, "edit task, greedy, draft's pass free", [edit_chat(CHANGES[0])], greedy, rounds,
                                ("off", "draft")))
        pass_s, fixed_s = engine.call(lambda: verifier.pass_costs).result()
        return records, DraftCost(draft.name, 1000 * pass_s, 1000 * fixed_s)
    finally:
        engine.shutdown(timeout=60)


def _compare(engine: Engine, name: str, chats: list[list[dict[str, str]]], sampling: SamplingParams, rounds: int,
             modes: tuple[str, ...], at_once: bool = True) -> SpeculativeRecord:
    """`chats` played each way of `modes` ("off" first), `rounds` times, the order turned each round."""
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    texts: dict[str, list[list[str]]] = {mode: [] for mode in modes}
    drafted = dict.fromkeys(modes, 0)
    accepted = dict.fromkeys(modes, 0)
    for r in range(rounds):
        for mode in modes[r % len(modes):] + modes[: r % len(modes)]:
            dones = _play(engine, chats, replace(sampling, speculative=mode), at_once)
            # Chats at once: their rates add up (they decode together); one at a time: their mean.
            per_chat = [d.stats.decode_tok_s for d in dones]
            rates[mode].append(sum(per_chat) if at_once else statistics.mean(per_chat))
            texts[mode].append([d.text for d in dones])
            drafted[mode] += sum(d.stats.drafted_tokens for d in dones)
            accepted[mode] += sum(d.stats.accepted_tokens for d in dones)
    median = {mode: statistics.median(rates[mode]) if mode in rates else 0.0 for mode in ("off", "lookup", "draft")}
    return SpeculativeRecord(name, len(chats), rounds, median["off"], median["lookup"], drafted.get("lookup", 0),
                             accepted.get("lookup", 0), all(texts[m] == texts["off"] for m in modes),
                             median["draft"], drafted.get("draft", 0), accepted.get("draft", 0))


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


def format_speculative_table(model: str, device: str, records: list[SpeculativeRecord],
                             draft: DraftCost | None = None) -> str:
    """The records as an aligned table: each workload's decode tok/s each way, the ratios, the drafts' fate; with a
    draft model, its columns and what its passes cost."""
    columns = ["workload", "chats", "runs", "off tok/s", "lookup tok/s", "x", "drafted", "accepted"]
    columns += ["draft tok/s", "x", "drafted", "accepted"] if draft else []
    rows = []
    for r in records:
        row = [r.workload, str(r.chats), str(r.runs), f"{r.plain_tok_s:.1f}"]
        ways = [(r.lookup_tok_s, r.drafted, r.accepted)] + ([(r.draft_tok_s, r.draft_drafted, r.draft_accepted)]
                                                             if draft else [])
        for tok_s, drafted, taken in ways:
            row += [f"{tok_s:.1f}", f"{tok_s / r.plain_tok_s:.2f}", str(drafted), _share(taken, drafted)] if tok_s \
                else ["-"] * 4
        rows.append((*row, "yes" if r.identical else "NO"))
    heading = "lookup drafts" + (f" and the draft model {draft.name}'s" if draft else "")
    lines = [f"model {model} | device {device} | speculative decoding: {heading} against none",
             *aligned((*columns, "same replies"), rows)]
    if draft:
        lines.append(f"draft model {draft.name}: a drafting pass {draft.pass_ms:.1f} ms, the fixed part of the "
                     f"target's checking pass {draft.target_fixed_ms:.1f} ms ({draft.ratio:.2f} of it)")
    return "\n".join(lines)


def _share(taken: int, drafted: int) -> str:
    return f"{taken} ({100 * taken / drafted:.0f}%)" if drafted else "0"

"""mlx-lm's own speculative decoding beside mlxchat's: `stream_generate(..., draft_model=...)` on the speculative
scenario's prompts (engine.bench.speculative_scenario), one chat at a time (mlx-lm drafts for one stream only): its
decode tok/s with the draft model and without, run for run, and whether its replies stay the same with it.

mlx-lm checks a draft in one pass of its tokens, whose rows need not round as single steps do, so a greedy reply may
drift from the reply without drafts; seeded, its sampler draws from MLX's global random stream, whose draws a drafted
reply spends otherwise (on the default model with itself as the draft, its seeded edit reply differed).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mlxchat.engine.bench import reference
from mlxchat.engine.bench.speculative_scenario import (
    CHANGES,
    EDIT_TOKENS,
    PLAIN_TOKENS,
    ROUNDS,
    SEEDED,
    edit_chat,
    plain_chats,
)
from mlxchat.engine.events import SamplingParams

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

NUM_DRAFT = 3  # mlx_lm.generate's own default (--num-draft-tokens)


@dataclass(frozen=True)
class PeerRecord:
    """One workload played by mlx-lm without a draft model and with it: the median decode tok/s each way, how many of
    the tokens with it came from the draft, and whether every reply was the same both ways."""

    workload: str
    runs: int
    plain_tok_s: float
    draft_tok_s: float
    tokens: int  # over every run with the draft model
    from_draft: int
    identical: bool


def run_mlx_lm_speculative(loaded: LoadedModel, draft: LoadedModel, rounds: int = ROUNDS) -> list[PeerRecord]:
    """The scenario's one-chat workloads, played by mlx-lm `rounds` times each way (the order turned each round)."""
    greedy = SamplingParams(temperature=0.0, max_tokens=EDIT_TOKENS)
    seeded = replace(SEEDED, max_tokens=EDIT_TOKENS)
    plain = SamplingParams(temperature=0.0, max_tokens=PLAIN_TOKENS)
    models = reference.model(loaded), reference.model(draft)
    return [
        _compare(loaded, models, "edit task, greedy", [edit_chat(CHANGES[0])], greedy, rounds),
        _compare(loaded, models, "edit task, seeded", [edit_chat(CHANGES[0])], seeded, rounds),
        _compare(loaded, models, "plain prompts", plain_chats(), plain, rounds),
    ]


def _compare(loaded: LoadedModel, models: tuple[Any, Any], name: str, chats: list[list[dict[str, str]]],
             sampling: SamplingParams, rounds: int) -> PeerRecord:
    rates: dict[bool, list[float]] = {False: [], True: []}
    texts: dict[bool, list[list[list[int]]]] = {False: [], True: []}
    tokens = from_draft = 0
    for r in range(rounds):
        for drafted in ((False, True) if r % 2 == 0 else (True, False)):
            played = [_generate(loaded, models[0], models[1] if drafted else None, chat, sampling) for chat in chats]
            rates[drafted].append(statistics.mean(p[1] for p in played))
            texts[drafted].append([p[0] for p in played])
            if drafted:
                tokens += sum(len(p[0]) for p in played)
                from_draft += sum(p[2] for p in played)
    return PeerRecord(name, rounds, statistics.median(rates[False]), statistics.median(rates[True]), tokens,
                      from_draft, texts[True] == texts[False])


def _generate(loaded: LoadedModel, model: Any, draft: Any, chat: list[dict[str, str]], sampling: SamplingParams
              ) -> tuple[list[int], float, int]:
    """One reply by mlx-lm's stream_generate (with `draft` drafting, where given): its tokens, its decode tok/s as
    mlx-lm measures it (past the prompt), and how many of its tokens came from the draft."""
    import mlx.core as mx
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_sampler

    prompt = loaded.tokenizer.apply_chat_template(chat, add_generation_prompt=True)
    sampler = make_sampler(temp=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
    if sampling.seed is not None:
        mx.random.seed(sampling.seed)
    extra = {"draft_model": draft, "num_draft_tokens": NUM_DRAFT} if draft is not None else {}
    tokens, tok_s, from_draft = [], 0.0, 0
    for response in stream_generate(model, loaded.tokenizer, prompt, max_tokens=sampling.max_tokens, sampler=sampler,
                                     **extra):
        tokens.append(response.token)
        tok_s, from_draft = response.generation_tps, from_draft + response.from_draft
    return tokens, tok_s, from_draft


def format_peer_table(records: list[PeerRecord]) -> str:
    """The records as an aligned table, under the speculative scenario's own."""
    from mlxchat.engine.bench.report import aligned

    rows = [(r.workload, str(r.runs), f"{r.plain_tok_s:.1f}", f"{r.draft_tok_s:.1f}",
             f"{r.draft_tok_s / r.plain_tok_s:.2f}" if r.plain_tok_s else "-",
             f"{r.from_draft} of {r.tokens}", "yes" if r.identical else "NO") for r in records]
    return "\n".join([f"mlx-lm {_version()}: stream_generate with the draft model ({NUM_DRAFT} tokens a draft) "
                      "against without, one chat at a time",
                      *aligned(("workload", "runs", "alone tok/s", "drafted tok/s", "x", "from the draft",
                                "same replies"), rows)])


def _version() -> str:
    from importlib.metadata import version

    return version("mlx-lm")

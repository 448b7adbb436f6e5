"""What a bench run plays (a workload: one prompt per slot, from a scenario) and what it observes (traces)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mlxchat.engine.events import SamplingParams

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

CTX_ROUNDING = 256  # a chosen per-slot context is rounded up to this many tokens

SYSTEM_PROMPT = "You are a helpful assistant. Answer carefully, in plain prose."
CONTEXT = (
    "A small team runs one language model on a laptop and wants several conversations at once: "
    "one person drafts an email, another asks about a bug in a parser, a script summarises meeting "
    "notes, and an agent plans a trip. Each conversation keeps its own history, and every reply "
    "should start quickly and stream at a steady pace even while the others are generating. "
    "Memory is limited, so the context of the model is shared between the conversations."
)
QUESTIONS = (
    "How should they split the context between the conversations, and why?",
    "What makes the first token of a reply slow, and what can they do about it?",
    "Which of the four tasks would you give the most context, and which the least?",
    "How would you explain the trade-off between more conversations and longer ones?",
    "What should happen when one conversation runs out of room in the middle of a reply?",
    "How could they measure whether adding a fifth conversation slows the others down?",
    "Write three short rules of thumb for the team, one sentence each.",
    "What would you log to find out why a reply was cut short?",
)


# A scenario gives, for a number of slots, one chat (a list of messages) per slot.
ChatBuilder = Callable[[int], list[list[dict[str, str]]]]
SCENARIOS: dict[str, ChatBuilder] = {}


@dataclass(frozen=True)
class Workload:
    """What one run plays: a tokenized prompt per slot and how many new tokens each must decode."""

    scenario: str
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int
    ctx_size: int = 0  # total context for engines that divide one (0: just enough for this run)
    sampling: SamplingParams = SamplingParams()  # its temperature, top_p and top_k; greedy by default

    @property
    def slots(self) -> int:
        """How many streams run: one per prompt."""
        return len(self.prompts)


@dataclass
class StreamTrace:
    """When one stream's prompt went in and when each of its new tokens came out (perf_counter seconds)."""

    prompt_tokens: int
    started: float
    token_times: list[float] = field(default_factory=list)

    def token(self) -> None:
        """Records that the stream produced its next token now."""
        self.token_times.append(time.perf_counter())


@dataclass
class RunTrace:
    """Everything a runner observed in one run, from which RunRecord's metrics are computed."""

    started: float
    streams: list[StreamTrace] = field(default_factory=list)
    kv_bytes: int = 0  # KV cache bytes allocated for the run (the most held at one time)
    sampling: str = "greedy"  # how the runner had its engine pick tokens (describe_sampling of what it passed)

    @contextmanager
    def stream(self, prompt_tokens: int) -> Iterator[StreamTrace]:
        """Times one stream: it starts when the block is entered; call `token()` for each new token."""
        trace = StreamTrace(prompt_tokens, time.perf_counter())
        yield trace
        self.streams.append(trace)


def scenario(name: str) -> Callable[[ChatBuilder], ChatBuilder]:
    """Registers a scenario's chat builder under `name` (the name `--scenario` and the report use)."""

    def register(fn: ChatBuilder) -> ChatBuilder:
        SCENARIOS[name] = fn
        return fn

    return register


@scenario("short")
def _short_chats(slots: int) -> list[list[dict[str, str]]]:
    """Every slot asks a different question about the same paragraph: prompts of about 130 tokens."""
    return [
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{CONTEXT}\n\n{QUESTIONS[i % len(QUESTIONS)]}"},
        ]
        for i in range(slots)
    ]


@scenario("reasoning")
def _reasoning_chats(slots: int) -> list[list[dict[str, str]]]:
    """The short chats, each asked to reason first: measured by mlxchat with and without its replies split
    into reasoning and answer (the command's engines for this scenario)."""
    return [[*chat[:-1], {"role": "user", "content": chat[-1]["content"] + " Think it through step by step first."}]
            for chat in _short_chats(slots)]


# The skewed scenario's long conversation: about 3000 tokens of notes before its question.
LONG_NOTES = 24


@scenario("skewed")
def _skewed_chats(slots: int) -> list[list[dict[str, str]]]:
    """Slot 0 holds a long conversation (about 3000 tokens), the others short ones."""
    notes = "\n\n".join(f"Note {k + 1}. {CONTEXT}" for k in range(LONG_NOTES))
    chats = _short_chats(slots)
    chats[0] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{notes}\n\nSummarise the notes above in one paragraph."},
    ]
    return chats


def make_workload(
    loaded: LoadedModel, scenario_name: str, slots: int, max_tokens: int, sampling: SamplingParams = SamplingParams()
) -> Workload:
    """Tokenizes the scenario's chats for `slots` slots with the model's chat template."""
    chats = SCENARIOS[scenario_name](slots)
    prompts = tuple(
        tuple(loaded.tokenizer.apply_chat_template(chat, add_generation_prompt=True)) for chat in chats
    )
    return Workload(scenario_name, prompts, max_tokens, sampling=sampling)


def describe_sampling(sampling: SamplingParams) -> str:
    """How a run picks its tokens, for the table's header."""
    if sampling.temperature <= 0:
        return "greedy"
    return f"temperature {sampling.temperature:g}, top_p {sampling.top_p:g}, top_k {sampling.top_k}"

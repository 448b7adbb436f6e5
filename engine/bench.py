"""Measures generation speed (prefill, decode, time to first token, memory) of the engines, for `mlxchat bench`.

Each engine is a runner registered by name. A runner plays a Workload (one prompt per slot,
a fixed number of new tokens each, greedy, EOS suppressed so every run decodes the same
count) and returns a RunTrace: when each stream started and when each of its tokens
arrived. The metrics are computed from traces in one place, so engines are compared on
the same definitions.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.models import LoadedModel

DEFAULT_MAX_TOKENS = 64
DEFAULT_REPEATS = 3
# The warm-up run only has to trigger lazy initialisation and compilation, not measure anything.
WARMUP_TOKENS = 8

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


@dataclass(frozen=True)
class Workload:
    """What one run plays: a tokenized prompt per slot and how many new tokens each must decode."""

    scenario: str
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: int

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

    @contextmanager
    def stream(self, prompt_tokens: int) -> Iterator[StreamTrace]:
        """Times one stream: it starts when the block is entered; call `token()` for each new token."""
        trace = StreamTrace(prompt_tokens, time.perf_counter())
        yield trace
        self.streams.append(trace)


@dataclass(frozen=True)
class RunRecord:
    """The measured speed of one engine on one scenario with a number of slots (medians over repeats)."""

    engine: str
    scenario: str
    slots: int
    decode_tok_s: float
    prefill_tok_s: float
    ttft_ms_p50: float
    step_ms_p50: float
    kv_bytes: int
    peak_bytes: int


@dataclass(frozen=True)
class BenchReport:
    """A bench session: what ran where, and one record per (engine, scenario, slots)."""

    model: str
    device: str
    blas: str
    dtype: str
    runs: list[RunRecord]

    def to_json(self) -> dict[str, Any]:
        """The report as `mlxchat bench --json` writes it."""
        return asdict(self)


Runner = Callable[["LoadedModel", Workload], RunTrace]
# A scenario gives, for a number of slots, one chat (a list of messages) per slot.
ChatBuilder = Callable[[int], list[list[dict[str, str]]]]
RUNNERS: dict[str, Runner] = {}
SCENARIOS: dict[str, ChatBuilder] = {}


def runner(name: str) -> Callable[[Runner], Runner]:
    """Registers an engine's runner under `name` (the name `--engines` and the report use)."""

    def register(fn: Runner) -> Runner:
        RUNNERS[name] = fn
        return fn

    return register


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


def make_workload(loaded: LoadedModel, scenario_name: str, slots: int, max_tokens: int) -> Workload:
    """Tokenizes the scenario's chats for `slots` slots with the model's chat template."""
    chats = SCENARIOS[scenario_name](slots)
    prompts = tuple(
        tuple(loaded.tokenizer.apply_chat_template(chat, add_generation_prompt=True)) for chat in chats
    )
    return Workload(scenario_name, prompts, max_tokens)


def run_bench(
    loaded: LoadedModel,
    *,
    engines: Sequence[str],
    scenario_name: str = "short",
    slots: Sequence[int] = (1,),
    max_tokens: int = DEFAULT_MAX_TOKENS,
    repeats: int = DEFAULT_REPEATS,
    on_case: Callable[[str], None] | None = None,
) -> list[RunRecord]:
    """Runs every engine for every slot count: one warm-up run, then `repeats` measured runs."""
    import mlx.core as mx

    records = []
    for engine in engines:
        run = RUNNERS[engine]
        for n in slots:
            if on_case:
                on_case(f"{engine}, {scenario_name}, {n} slot{'s' if n > 1 else ''}")
            workload = make_workload(loaded, scenario_name, n, max_tokens)
            run(loaded, replace(workload, max_tokens=min(max_tokens, WARMUP_TOKENS)))
            measured = []
            for _ in range(repeats):
                mx.reset_peak_memory()
                trace = run(loaded, workload)
                measured.append(summarize(engine, workload, trace, mx.get_peak_memory()))
            records.append(median_record(measured))
    return records


def summarize(engine: str, workload: Workload, trace: RunTrace, peak_bytes: int) -> RunRecord:
    """The metrics of one run.

    TTFT counts from the start of the run, so streams that wait for others pay for it. Prefill
    and decode speeds divide tokens by the time during which at least one stream was in that
    phase, which is the sum for engines that run streams one after another and the overlap
    for engines that batch them.
    """
    streams = [s for s in trace.streams if s.token_times]
    prefill_tokens = sum(s.prompt_tokens for s in streams)
    decode_tokens = sum(len(s.token_times) - 1 for s in streams)
    prefill_s = _covered([(s.started, s.token_times[0]) for s in streams])
    decode_s = _covered([(s.token_times[0], s.token_times[-1]) for s in streams])
    steps = [b - a for s in streams for a, b in zip(s.token_times, s.token_times[1:])]
    return RunRecord(
        engine=engine,
        scenario=workload.scenario,
        slots=workload.slots,
        decode_tok_s=decode_tokens / decode_s if decode_s else 0.0,
        prefill_tok_s=prefill_tokens / prefill_s if prefill_s else 0.0,
        ttft_ms_p50=1000 * statistics.median(s.token_times[0] - trace.started for s in streams) if streams else 0.0,
        step_ms_p50=1000 * statistics.median(steps) if steps else 0.0,
        kv_bytes=trace.kv_bytes,
        peak_bytes=peak_bytes,
    )


def median_record(records: Sequence[RunRecord]) -> RunRecord:
    """One record whose every measurement is the median of that measurement over `records`."""
    values: dict[str, Any] = {"engine": records[0].engine, "scenario": records[0].scenario, "slots": records[0].slots}
    for f in fields(RunRecord):
        if f.name not in values:
            median = statistics.median(getattr(r, f.name) for r in records)
            values[f.name] = int(median) if f.type == "int" else median
    return RunRecord(**values)


def make_report(loaded: LoadedModel, runs: list[RunRecord]) -> BenchReport:
    """The report of `runs`, saying which model, device, BLAS and dtype they ran on."""
    from engine.blas import blas_in_use
    from engine.devices import device_kind, device_name

    return BenchReport(
        model=loaded.source.display_name,
        device=f"{device_kind()} ({device_name()})",
        blas=blas_in_use().kind,
        dtype=loaded.dtype,
        runs=runs,
    )


def _covered(intervals: list[tuple[float, float]]) -> float:
    """The total length of the union of `intervals`."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def format_table(report: BenchReport) -> str:
    """The report as an aligned text table, with a header saying what ran where."""
    header = f"model {report.model} | {report.dtype} | device {report.device} | BLAS {report.blas}"
    columns = ("engine", "scenario", "slots", "decode tok/s", "prefill tok/s", "TTFT ms", "step ms", "KV MiB", "peak MiB")
    rows = [
        (
            r.engine,
            r.scenario,
            str(r.slots),
            f"{r.decode_tok_s:.1f}",
            f"{r.prefill_tok_s:.1f}",
            f"{r.ttft_ms_p50:.0f}",
            f"{r.step_ms_p50:.1f}",
            f"{r.kv_bytes / 2**20:.1f}",
            f"{r.peak_bytes / 2**20:.0f}",
        )
        for r in report.runs
    ]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(columns)]
    # Names read best left-aligned, numbers right-aligned.
    lines = [
        "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        for row in [columns, *rows]
    ]
    return "\n".join([header, *lines])


def write_json(report: BenchReport, path: Path) -> None:
    """Writes the report as JSON to `path`."""
    Path(path).write_text(json.dumps(report.to_json(), indent=2) + "\n")


def _no_eos(eos_token_ids: Sequence[int]) -> Callable[[Any, Any], Any]:
    """An mlx-lm logits processor that never lets an end-of-sequence token be chosen."""
    import mlx.core as mx

    banned = mx.array(sorted(eos_token_ids), dtype=mx.int32)

    def process(tokens: Any, logits: Any) -> Any:
        logits[..., banned] = -float("inf")
        return logits

    return process


@runner("mlx-lm-sequential")
def _mlx_lm_sequential(loaded: LoadedModel, workload: Workload) -> RunTrace:
    """mlx-lm's own `stream_generate`, one stream after the other: the baseline to beat."""
    from mlx_lm.generate import stream_generate
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.sample_utils import make_sampler

    greedy = make_sampler(temp=0.0)
    no_eos = _no_eos(loaded.tokenizer.eos_token_ids)
    trace = RunTrace(time.perf_counter())
    for prompt in workload.prompts:
        cache = make_prompt_cache(loaded.model)
        with trace.stream(len(prompt)) as stream:
            for _ in stream_generate(
                loaded.model,
                loaded.tokenizer,
                list(prompt),
                max_tokens=workload.max_tokens,
                sampler=greedy,
                logits_processors=[no_eos],
                prompt_cache=cache,
            ):
                stream.token()
        # One stream holds a cache at a time; the largest is what the run needed.
        trace.kv_bytes = max(trace.kv_bytes, sum(c.nbytes for c in cache))
    return trace

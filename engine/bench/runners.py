"""Measures generation speed (prefill, decode, time to first token, memory) of the engines, for `mlxchat bench`.

Each engine is a runner registered by name. A runner plays a Workload (one prompt per slot,
a fixed number of new tokens each, greedy, EOS suppressed so every run decodes the same
count) and returns a RunTrace: when each stream started and when each of its tokens
arrived. The metrics are computed from traces in one place, so engines are compared on
the same definitions.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

DEFAULT_MAX_TOKENS = 64
DEFAULT_ENGINES = ("mlxchat", "mlx-lm-batch", "mlx-lm-sequential")
DEFAULT_SLOTS = (1, 2, 4, 8)
MAX_SLOTS = 64
DEFAULT_REPEATS = 3
# The warm-up run only has to trigger lazy initialisation and compilation, not measure anything.
WARMUP_TOKENS = 8
CTX_ROUNDING = 256  # a chosen per-slot context is rounded up to this many tokens
# A decode rate needs a window this long with this many tokens a stream, else it is no measurement.
MIN_DECODE_S = 0.005
MIN_DECODE_TOKENS = 2

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
    ctx_size: int = 0  # total context for engines that divide one (0: just enough for this run)

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
    machine: str = ""  # the CPU (model, cores, vector extensions) or the GPU's name
    tuning: str = ""  # how the CPU path runs the model here, as measured by `mlxchat doctor --tune`

    def to_json(self) -> dict[str, Any]:
        """The report as `mlxchat bench --json` writes it."""
        return asdict(self)


Runner = Callable[["LoadedModel", Workload], RunTrace]
# A scenario gives, for a number of slots, one chat (a list of messages) per slot.
ChatBuilder = Callable[[int], list[list[dict[str, str]]]]
RUNNERS: dict[str, Runner] = {}
SCENARIOS: dict[str, ChatBuilder] = {}


class BenchError(Exception):
    """An engine failed a run: the bench stops and says which engine and why, instead of printing figures."""


class BenchRefused(BenchError):
    """The bench's settings cannot run (the command exits 2, as for any refused setting)."""


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
    ctx_size: int | None = None,
    per_slot_min: int = 0,
    on_case: Callable[[str], None] | None = None,
) -> list[RunRecord]:
    """Runs every engine for every slot count: one warm-up run, then `repeats` measured runs.

    One total context serves every slot count (so KV bytes can be compared across them): `ctx_size`
    if given, else the least that fits the scenario's longest prompt and reply at the most slots.
    """
    workloads = {n: make_workload(loaded, scenario_name, n, max_tokens) for n in slots}
    need = max(len(p) for w in workloads.values() for p in w.prompts) + max_tokens + 1
    if ctx_size is None:
        ctx_size = max(slots) * -(-need // CTX_ROUNDING) * CTX_ROUNDING
    _check_context(ctx_size, slots, max(need, per_slot_min), max_tokens)
    try:
        return _run_cases(loaded, engines, scenario_name, workloads, ctx_size, repeats, on_case)
    finally:
        close_engines()


def _check_context(ctx_size: int, slots: Sequence[int], need: int, max_tokens: int) -> None:
    """Refuses a total context that gives some slot count fewer tokens per slot than a run needs."""
    from mlxchat.engine.plan import SlotRequest, plan_slots

    for n in slots:
        plan = plan_slots(SlotRequest(n, ctx_size, parallel_max=MAX_SLOTS, per_slot_floor=0, per_slot_min=need), None, 0)
        if plan.errors:
            raise BenchRefused(
                f"{'; '.join(plan.errors)} (a slot of this run holds its longest prompt, {max_tokens} new tokens "
                f"and one more; --ctx-size {need * n} fits {n} slots)"
            )


def _run_cases(
    loaded: LoadedModel,
    engines: Sequence[str],
    scenario_name: str,
    workloads: dict[int, Workload],
    ctx_size: int,
    repeats: int,
    on_case: Callable[[str], None] | None,
) -> list[RunRecord]:
    """Every (engine, slot count) case: one warm-up run each, then `repeats` measured runs.

    The engines take turns run by run, so a process that speeds up as it warms (allocator,
    BLAS threads) favours none of them; records come out engine by engine.
    """
    import mlx.core as mx

    measured: dict[tuple[str, int], list[RunRecord]] = {(e, n): [] for e in engines for n in workloads}
    for n, workload in workloads.items():
        workload = replace(workload, ctx_size=ctx_size)
        for engine in engines:
            if on_case:
                on_case(f"{engine}, {scenario_name}, {n} slot{'s' if n > 1 else ''}")
            _play(engine, loaded, replace(workload, max_tokens=min(workload.max_tokens, WARMUP_TOKENS)))
        for _ in range(repeats):
            for engine in engines:
                mx.reset_peak_memory()
                trace = _play(engine, loaded, workload)
                measured[engine, n].append(summarize(engine, workload, trace, mx.get_peak_memory()))
    return [median_record(runs) for runs in measured.values()]


def _play(engine: str, loaded: LoadedModel, workload: Workload) -> RunTrace:
    """One run of `engine`; a failure, or a run in which a stream produced nothing, is a BenchError naming it."""
    try:
        trace = RUNNERS[engine](loaded, workload)
    except BenchError as exc:
        raise BenchError(f"{engine}: {exc}") from exc
    except Exception as exc:
        raise BenchError(f"{engine} failed on {workload.slots} slots: {type(exc).__name__}: {exc}") from exc
    silent = sum(1 for s in trace.streams if not s.token_times)
    if silent or len(trace.streams) < workload.slots:
        raise BenchError(f"{engine}: {silent or workload.slots - len(trace.streams)} of {workload.slots} streams produced no token")
    return trace


def summarize(engine: str, workload: Workload, trace: RunTrace, peak_bytes: int) -> RunRecord:
    """The metrics of one run.

    TTFT counts from the start of the run, so streams that wait for others pay for it. Prefill
    and decode speeds divide tokens by the time during which at least one stream was in that
    phase, which is the sum for engines that run streams one after another and the overlap
    for engines that batch them. Decoding counts from when every stream running alongside has
    its first token, so an engine that interleaves prefill with decoding is timed on its
    steady decode, as an engine that prefills everything first is.
    """
    streams = [s for s in trace.streams if s.token_times]
    prefill_tokens = sum(s.prompt_tokens for s in streams)
    windows = [_steady_decode(s, streams) for s in streams]
    decode_tokens = sum(sum(1 for t in s.token_times if t > start) for s, (start, _) in zip(streams, windows))
    decode_s = _covered(windows)
    if decode_tokens < MIN_DECODE_TOKENS * len(streams) or decode_s < MIN_DECODE_S:
        # Too short a steady window to time (streams that never all decode at once): from each first token on.
        windows = [(s.token_times[0], s.token_times[-1]) for s in streams]
        decode_tokens = sum(len(s.token_times) - 1 for s in streams)
        decode_s = _covered(windows)
    prefill_s = _covered([(s.started, s.token_times[0]) for s in streams])
    steps = [b - a for s in streams for a, b in zip(s.token_times, s.token_times[1:])]
    return RunRecord(
        engine=engine,
        scenario=workload.scenario,
        slots=workload.slots,
        # No figure rather than an impossible one: NaN prints as "-" and says why under the table.
        decode_tok_s=decode_tokens / decode_s if decode_s >= MIN_DECODE_S and decode_tokens else math.nan,
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
    from mlxchat.engine.cpu import tuning
    from mlxchat.engine.cpu.blas import blas_in_use
    from mlxchat.engine.devices import cpu_summary, device_kind, device_name

    kind = device_kind()
    how = ""
    if tuning.tunable(loaded.model):
        tuned = loaded.tuning
        how = tuned.describe() if tuned else "split matmuls, not measured here (`mlxchat doctor --tune` measures)"
    return BenchReport(
        model=loaded.source.display_name,
        device=f"{kind} ({device_name()})",
        blas=blas_in_use().kind,
        dtype=loaded.dtype,
        runs=runs,
        machine=cpu_summary() if kind == "cpu" else device_name(),
        tuning=how,
    )


def _steady_decode(stream: StreamTrace, streams: list[StreamTrace]) -> tuple[float, float]:
    """The part of `stream`'s decoding during which no stream overlapping it was still prefilling."""
    end = stream.token_times[-1]
    alongside = [s.token_times[0] for s in streams if s.started < end and s.token_times[-1] > stream.started]
    return min(max(alongside), end), end


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
    header = f"model {report.model} | {report.dtype} | device {report.device} | BLAS {report.blas}\n{report.machine}"
    if report.tuning:
        header += f"\nCPU path: {report.tuning}"
    columns = ("engine", "scenario", "slots", "decode tok/s", "prefill tok/s", "TTFT ms", "step ms", "KV MiB", "peak MiB")
    rows = [
        (
            r.engine,
            r.scenario,
            str(r.slots),
            "-" if math.isnan(r.decode_tok_s) else f"{r.decode_tok_s:.1f}",
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
    if any(math.isnan(r.decode_tok_s) for r in report.runs):
        lines.append(f"-: the streams decoded for less than {MIN_DECODE_S * 1000:.0f} ms: no rate to give (raise --max-tokens)")
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


@runner("mlx-lm-batch")
def _mlx_lm_batch(loaded: LoadedModel, workload: Workload) -> RunTrace:
    """mlx-lm's BatchGenerator (continuous batching over a left-padded KV cache), all streams at once."""
    from mlx_lm.generate import BatchGenerator

    # No stop tokens: every stream decodes exactly max_tokens, as the other engines do.
    gen = BatchGenerator(
        loaded.model,
        max_tokens=workload.max_tokens,
        stop_tokens=[],
        completion_batch_size=workload.slots,
        prefill_batch_size=workload.slots,
    )
    trace = RunTrace(time.perf_counter())
    uids = gen.insert([list(p) for p in workload.prompts])
    streams = {uid: StreamTrace(len(p), trace.started) for uid, p in zip(uids, workload.prompts)}
    trace.streams.extend(streams.values())
    done: set[int] = set()
    while len(done) < len(streams):
        _, responses = gen.next()
        for r in responses:
            streams[r.uid].token()
            if r.finish_reason is not None:
                done.add(r.uid)
        batch = gen._generation_batch  # the only place its cache size can be read
        trace.kv_bytes = max(trace.kv_bytes, sum(c.nbytes for c in batch.prompt_cache or []))
    gen.close()
    return trace


@runner("mlxchat")
def _mlxchat(loaded: LoadedModel, workload: Workload) -> RunTrace:
    """mlxchat's engine: one slot per stream over a divided KV cache, every decode step batched."""
    from mlxchat.engine.events import SamplingParams, TextDelta
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.plan import SlotRequest, plan_slots

    n = workload.slots
    need = max(len(p) for p in workload.prompts) + workload.max_tokens + 1
    request = SlotRequest(n, workload.ctx_size or n * need, parallel_max=n, per_slot_floor=0, per_slot_min=need)
    plan = plan_slots(request, trained_ctx=None, kv_bytes_per_token=loaded.kv_bytes_per_token,
                      kv_footprint=loaded.kv_footprint)
    # One engine serves every run, re-partitioned for it, as the app re-partitions its own:
    # MLX runs best when one thread owns its streams for the whole process.
    engine = _ENGINES.get(id(loaded.model))
    if engine is None:
        split = loaded.tuning.split if loaded.tuning else None
        engine = _ENGINES[id(loaded.model)] = Engine(
            loaded.model, loaded.tokenizer, plan, split=split, padded_prefill=loaded.padded_prefill
        )
    else:
        engine.repartition(plan).result()
    for slot in range(n):
        engine.clear(slot, park=False)  # no prompt may reuse what an earlier run cached
    sampling = SamplingParams(max_tokens=workload.max_tokens, ignore_eos=True)
    trace = RunTrace(time.perf_counter())
    handles = []
    for slot, prompt in enumerate(workload.prompts):
        stream = StreamTrace(len(prompt), trace.started)
        trace.streams.append(stream)

        def on_event(event: Any, stream: StreamTrace = stream) -> None:
            if isinstance(event, TextDelta):
                for _ in range(event.tokens):
                    stream.token()

        handles.append(engine.submit(slot, tokens=list(prompt), sampling=sampling, on_event=on_event))
    for handle in handles:
        done = handle.result()
        if done.reason == "error":
            raise BenchError(f"mlxchat's engine failed: {done.error}")
    trace.kv_bytes = engine.snapshot().kv_bytes_allocated
    return trace


_ENGINES: dict[int, Any] = {}


def close_engines() -> None:
    """Shuts down the engines the mlxchat runner kept between runs."""
    while _ENGINES:
        _ENGINES.popitem()[1].shutdown()

"""Measures generation speed (prefill, decode, time to first token, memory) of the engines, for `mlxchat bench`.

Each engine is a runner registered by name (engine.bench.registry). A runner plays a Workload
(one prompt per slot, a fixed number of new tokens each, greedy or with the chats' sampling, EOS
suppressed so every run decodes the same count) and returns a RunTrace: when each stream started and
when each of its tokens arrived. The metrics are computed from traces in one place (engine.bench.metrics), so
engines are compared on the same definitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

# The runners register themselves as they are imported.
from mlxchat.engine.bench import mlx_lm_runners, mlxchat_runner, reference  # noqa: F401
from mlxchat.engine.bench.metrics import RunRecord, median_record, summarize
from mlxchat.engine.bench.mlxchat_runner import UNSPLIT, close_engines
from mlxchat.engine.bench.registry import RUNNERS, BenchError, BenchRefused
from mlxchat.engine.bench.workloads import CTX_ROUNDING, RunTrace, Workload, make_workload
from mlxchat.engine.events import SamplingParams

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

DEFAULT_MAX_TOKENS = 64
DEFAULT_ENGINES = ("mlxchat", "mlx-lm-batch", "mlx-lm-sequential")
# The engines a scenario compares when none are named: --scenario reasoning, mlxchat with and without its split.
SCENARIO_ENGINES = {"reasoning": ("mlxchat", UNSPLIT)}
DEFAULT_SLOTS = (1, 2, 4, 8)
MAX_SLOTS = 64
DEFAULT_REPEATS = 3
# The warm-up run only has to trigger lazy initialisation and compilation, not measure anything.
WARMUP_TOKENS = 8


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
    sampling: SamplingParams = SamplingParams(),
    on_case: Callable[[str], None] | None = None,
) -> list[RunRecord]:
    """Runs every engine for every slot count: one warm-up run, then `repeats` measured runs.

    One total context serves every slot count (so KV bytes can be compared across them): `ctx_size`
    if given, else the least that fits the scenario's longest prompt and reply at the most slots.
    """
    workloads = {n: make_workload(loaded, scenario_name, n, max_tokens, sampling) for n in slots}
    need = max(len(p) for w in workloads.values() for p in w.prompts) + max_tokens + 1
    if ctx_size is None:
        ctx_size = max(slots) * -(-need // CTX_ROUNDING) * CTX_ROUNDING
    _check_context(ctx_size, slots, max(need, per_slot_min), max_tokens)
    try:
        return _run_cases(loaded, engines, scenario_name, workloads, ctx_size, repeats, on_case)
    finally:
        close_engines()
        reference.forget(loaded)


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
                peak = mx.get_peak_memory() - reference.idle_bytes(loaded, engine.startswith("mlx-lm"))
                measured[engine, n].append(summarize(engine, workload, trace, peak))
    return [median_record(runs) for runs in measured.values()]


def _play(engine: str, loaded: LoadedModel, workload: Workload) -> RunTrace:
    """One run of `engine`; a failure, or a run in which a stream produced nothing, is a BenchError naming it."""
    try:
        trace = RUNNERS[engine](loaded, workload)
    except BenchError as exc:  # of its kind: a refused setting stays refused (exit 2)
        raise type(exc)(f"{engine}: {exc}") from exc
    except Exception as exc:
        raise BenchError(f"{engine} failed on {workload.slots} slots: {type(exc).__name__}: {exc}") from exc
    silent = sum(1 for s in trace.streams if not s.token_times)
    if silent or len(trace.streams) < workload.slots:
        missing = silent or workload.slots - len(trace.streams)
        raise BenchError(f"{engine}: {missing} of {workload.slots} streams produced no token")
    return trace

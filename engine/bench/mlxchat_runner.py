"""mlxchat's engine as a bench runner: one slot per stream, kept between runs and re-partitioned for each."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mlxchat.engine.bench.registry import BenchError, runner
from mlxchat.engine.bench.workloads import RunTrace, StreamTrace, Workload, describe_sampling

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

UNSPLIT = "mlxchat-unsplit"  # the engine with the reasoning split off (--scenario reasoning's reference)


@runner("mlxchat")
def _mlxchat(loaded: LoadedModel, workload: Workload) -> RunTrace:
    """mlxchat's engine: one slot per stream over a divided KV cache, every decode step batched."""
    return _play(loaded, workload, scan=True)


@runner(UNSPLIT)
def _mlxchat_unsplit(loaded: LoadedModel, workload: Workload) -> RunTrace:
    """mlxchat's engine with its replies' text not split into reasoning and answer (mlx-lm's state machine off):
    beside "mlxchat", what the split costs."""
    return _play(loaded, workload, scan=False)


def _play(loaded: LoadedModel, workload: Workload, scan: bool) -> RunTrace:
    from mlxchat.engine.events import TextDelta

    n = workload.slots
    need = max(len(p) for p in workload.prompts) + workload.max_tokens + 1
    engine = engine_for(loaded, n, need, workload.ctx_size)
    engine.call(lambda: engine.core.replies.scan(scan)).result()
    for slot in range(n):
        engine.clear(slot, park=False)  # no prompt may reuse what an earlier run cached
    sampling = replace(workload.sampling, max_tokens=workload.max_tokens, ignore_eos=True)
    trace = RunTrace(time.perf_counter(), sampling=describe_sampling(sampling))
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


def engine_for(loaded: LoadedModel, n: int, need: int, ctx_size: int | None = None) -> Any:
    """The engine kept for `loaded`, partitioned into `n` slots of at least `need` tokens.

    One engine serves every run, re-partitioned for it, as the app re-partitions its own: MLX runs best when
    one thread owns its streams for the whole process."""
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.plan import SlotRequest

    request = SlotRequest(n, ctx_size or n * need, parallel_max=n, per_slot_floor=0, per_slot_min=need)
    plan = loaded.facts.evaluate(request, capped=False)
    engine = _ENGINES.get(id(loaded.model))
    if engine is None:
        split = loaded.tuning.split if loaded.tuning else None
        engine = _ENGINES[id(loaded.model)] = Engine(loaded.ready, plan, split=split
        )
    else:
        engine.repartition(plan).result()
    return engine


_ENGINES: dict[int, Any] = {}


def close_engines() -> None:
    """Shuts down the engines the mlxchat runner kept between runs."""
    while _ENGINES:
        _ENGINES.popitem()[1].shutdown()

"""mlx-lm's own ways of generating, as bench runners: one stream after another, and its BatchGenerator."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mlxchat.engine.bench import reference
from mlxchat.engine.bench.registry import runner
from mlxchat.engine.bench.workloads import RunTrace, StreamTrace, Workload, describe_sampling

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel


def _no_eos(eos_token_ids: Sequence[int]) -> Callable[[Any, Any], Any]:
    """An mlx-lm logits processor that never lets an end-of-sequence token be chosen."""
    import mlx.core as mx

    banned = mx.array(sorted(eos_token_ids), dtype=mx.int32)

    def process(tokens: Any, logits: Any) -> Any:
        logits[..., banned] = -float("inf")
        return logits

    return process


def _sampler(workload: Workload) -> tuple[Callable[[Any], Any], str]:
    """mlx-lm's own sampler for the workload's temperature, top_p and top_k (greedy at temperature 0), and how
    it samples in words, for the run's trace."""
    from mlx_lm.sample_utils import make_sampler

    s = workload.sampling
    return make_sampler(temp=s.temperature, top_p=s.top_p, top_k=s.top_k), describe_sampling(s)


@runner("mlx-lm-sequential")
def _mlx_lm_sequential(loaded: LoadedModel, workload: Workload) -> RunTrace:
    """mlx-lm's own `stream_generate`, one stream after the other: the baseline to beat."""
    from mlx_lm.generate import stream_generate
    from mlx_lm.models.cache import make_prompt_cache

    sampler, how = _sampler(workload)
    no_eos = _no_eos(loaded.tokenizer.eos_token_ids)
    model = reference.model(loaded)
    trace = RunTrace(time.perf_counter(), sampling=how)
    for prompt in workload.prompts:
        cache = make_prompt_cache(model)
        with trace.stream(len(prompt)) as stream:
            for _ in stream_generate(
                model,
                loaded.tokenizer,
                list(prompt),
                max_tokens=workload.max_tokens,
                sampler=sampler,
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

    sampler, how = _sampler(workload)
    # No stop tokens: every stream decodes exactly max_tokens, as the other engines do.
    gen = BatchGenerator(
        reference.model(loaded),
        max_tokens=workload.max_tokens,
        stop_tokens=[],
        completion_batch_size=workload.slots,
        prefill_batch_size=workload.slots,
        sampler=sampler,
    )
    trace = RunTrace(time.perf_counter(), sampling=how)
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

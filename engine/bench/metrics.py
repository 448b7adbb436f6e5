"""The metrics of a bench run, computed from its trace in one place, so engines are compared on one definition."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from mlxchat.engine.bench.workloads import RunTrace, StreamTrace, Workload

# A decode rate needs a window longer than the timer can tell from zero (tokens that arrive in one
# event share an instant) with this many tokens a stream, else it is no measurement.
MIN_DECODE_S = 1e-4
MIN_DECODE_TOKENS = 2


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
    sampling: str = "greedy"  # how the engine picked its tokens in this run


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
        sampling=trace.sampling,
    )


def median_record(records: Sequence[RunRecord]) -> RunRecord:
    """One record whose every measurement is the median of that measurement over `records`."""
    first = records[0]
    values: dict[str, Any] = {"engine": first.engine, "scenario": first.scenario, "slots": first.slots,
                              "sampling": first.sampling}
    for f in fields(RunRecord):
        if f.name not in values:
            median = statistics.median(getattr(r, f.name) for r in records)
            values[f.name] = int(median) if f.type == "int" else median
    return RunRecord(**values)


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

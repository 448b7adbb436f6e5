"""`mlxchat bench --scenario long`: chats stream while one long prompt arrives; do they freeze?

N chats stream replies. Once their pace is steady, another chat sends a long prompt. The bench
reports the streaming chats' gaps between tokens before it arrived and while it was read (p50
and worst), and the long prompt's time to first token against its time alone (the same prompt
in the same slot, the others idle), measured in the same run.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlxchat.engine.bench.workloads import CONTEXT, CTX_ROUNDING, QUESTIONS, SYSTEM_PROMPT
from mlxchat.engine.prefill.pacing import STALL

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

LONG_SCENARIO = "long"
LONG_STREAMS = 3
LONG_PROMPT_TOKENS = 3000
STEADY_TOKENS = 24  # tokens each stream gives before the long prompt is sent (its "before" gaps)
WAIT_S = 600.0


@dataclass(frozen=True)
class LongRecord:
    """One run of the scenario: the streams' gaps (ms) before and during the long prefill, and its TTFT."""

    streams: int
    prompt_tokens: int
    stall: float
    gap_before_p50: float
    gap_before_max: float
    gap_during_p50: float
    gap_during_max: float
    ttft_alone_ms: float
    ttft_streaming_ms: float


@dataclass
class _Stream:
    times: list[float] = field(default_factory=list)


def long_prompt(tokenizer: Any, tokens: int) -> list[int]:
    """A chat-templated prompt of exactly `tokens` tokens: numbered notes, cut to length."""
    notes = 1 + tokens // 40
    while True:
        text = "\n\n".join(f"Note {k + 1}. {CONTEXT}" for k in range(notes))
        chat = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]
        prompt = list(tokenizer.apply_chat_template(chat, add_generation_prompt=True))
        if len(prompt) >= tokens:
            return prompt[:tokens]
        notes *= 2


def run_long_bench(
    loaded: LoadedModel, *, streams: int = LONG_STREAMS, prompt_tokens: int = LONG_PROMPT_TOKENS,
    stall: float = STALL,
) -> LongRecord:
    """Times the long prompt alone, then with `streams` chats streaming, on one engine whose streams may
    slow to `stall` times their step while it is read (the setting prefill_stall)."""
    from mlxchat.engine.events import SamplingParams
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.plan import SlotRequest

    long = long_prompt(loaded.tokenizer, prompt_tokens)
    per_slot = -(-(prompt_tokens + 64) // CTX_ROUNDING) * CTX_ROUNDING
    slots = streams + 1
    request = SlotRequest(slots, slots * per_slot, parallel_max=slots, per_slot_floor=0, per_slot_min=per_slot)
    plan = loaded.facts.evaluate(request, capped=False)
    split = loaded.tuning.split if loaded.tuning else None
    engine = Engine(loaded.ready, plan, split=split,
                    prefill_stall=stall)
    one = SamplingParams(max_tokens=1, ignore_eos=True)
    try:
        # Warm-up: lazy initialisation, and a first measure of every pass kind.
        engine.submit(streams, tokens=long[:300], sampling=one).result()
        engine.clear(streams, park=False)
        alone = _ttft(engine, streams, long, one)
        engine.clear(streams, park=False)
        return _with_streams(engine, loaded.tokenizer, streams, long, alone, per_slot, stall)
    finally:
        engine.shutdown()


def _ttft(engine: Any, slot: int, prompt: list[int], sampling: Any) -> float:
    done = engine.submit(slot, tokens=prompt, sampling=sampling).result(timeout=WAIT_S)
    if done.error:
        raise RuntimeError(done.error)
    return done.stats.ttft_s


def _with_streams(
    engine: Any, tokenizer: Any, streams: int, long: list[int], alone_s: float, per_slot: int, stall: float
) -> LongRecord:
    from mlxchat.engine.events import SamplingParams, TextDelta

    traces = [_Stream() for _ in range(streams)]
    steady = threading.Semaphore(0)  # released once by each stream at its steady pace (never blocks the engine)
    reply = SamplingParams(max_tokens=per_slot // 2, ignore_eos=True)
    handles = []
    for s, trace in enumerate(traces):
        chat = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"{CONTEXT}\n\n{QUESTIONS[s % len(QUESTIONS)]}"}]
        prompt = list(tokenizer.apply_chat_template(chat, add_generation_prompt=True))

        def on_event(event: Any, trace: _Stream = trace) -> None:
            if isinstance(event, TextDelta):
                trace.times.append(time.perf_counter())
                if len(trace.times) == STEADY_TOKENS:
                    steady.release()

        handles.append(engine.submit(s, tokens=prompt, sampling=reply, on_event=on_event))
    for _ in traces:
        if not steady.acquire(timeout=WAIT_S):
            raise RuntimeError("a streaming chat stopped before it reached a steady pace")
    sent = time.perf_counter()
    done = engine.submit(streams, tokens=long, sampling=SamplingParams(max_tokens=1, ignore_eos=True)).result(
        timeout=WAIT_S
    )
    first = sent + done.stats.ttft_s
    # Each stream's gap across the prefill's end counts too: wait for its next token.
    deadline = time.perf_counter() + WAIT_S
    while any(t.times[-1] <= first for t in traces) and time.perf_counter() < deadline:
        time.sleep(0.01)
    for s in range(streams):
        engine.cancel(s)
    for h in handles:
        h.result(timeout=WAIT_S)
    before, during = [], []
    for t in traces:
        for k, (a, b) in enumerate(zip(t.times, t.times[1:])):
            if b <= sent:
                if k >= 2:  # past the stream's first tokens
                    before.append(1000 * (b - a))
            elif a < first:  # the gap overlaps the long prompt's prefill
                during.append(1000 * (b - a))
    return LongRecord(
        streams=streams,
        prompt_tokens=len(long),
        stall=stall,
        gap_before_p50=statistics.median(before),
        gap_before_max=max(before),
        gap_during_p50=statistics.median(during) if during else float("nan"),
        gap_during_max=max(during, default=float("nan")),
        ttft_alone_ms=1000 * alone_s,
        ttft_streaming_ms=1000 * done.stats.ttft_s,
    )


def format_long_table(model: str, device: str, r: LongRecord) -> str:
    """The record as a table, with the two ratios the scenario is about."""
    rows = [
        ("streaming gap, before", f"{r.gap_before_p50:.0f}", f"{r.gap_before_max:.0f}"),
        ("streaming gap, during the prefill", f"{r.gap_during_p50:.0f}", f"{r.gap_during_max:.0f}"),
    ]
    lines = [
        f"model {model} | device {device} | {r.streams} chats streaming, a {r.prompt_tokens}-token prompt arriving"
        f" | prefill_stall {r.stall:g}",
        f"{'':34}  {'p50 ms':>7}  {'max ms':>7}",
        *(f"{a:34}  {b:>7}  {c:>7}" for a, b, c in rows),
        f"gap during / before: p50 {r.gap_during_p50 / r.gap_before_p50:.1f}x, worst "
        f"{r.gap_during_max / r.gap_before_p50:.1f}x (of the p50 before)",
        f"long prompt's first token: {r.ttft_streaming_ms / 1000:.1f} s with the streams, "
        f"{r.ttft_alone_ms / 1000:.1f} s alone ({r.ttft_streaming_ms / r.ttft_alone_ms:.2f}x)",
    ]
    return "\n".join(lines)

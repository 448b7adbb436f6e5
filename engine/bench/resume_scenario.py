"""`mlxchat bench --scenario resume`: time to first token of a long chat reopened after a restart.

A chat of about 1,500 tokens gets a reply, then the engine closes as the app does when it quits
(with the disk tier, every slot's KV is written and waited for). A new engine starts, as the
next launch would, and the chat sends its next message: with the tier its history is read back
from disk, without it the whole history is prefilled again. The chat's first turn (its history
read the first time) is timed too.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlxchat.engine.bench.return_scenario import RETURN_NOTES, openings
from mlxchat.engine.bench.report import aligned
from mlxchat.engine.bench.workloads import CTX_ROUNDING

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

RESUME_SCENARIO = "resume"
RESUME_TOKENS = 16
DISK_BUDGET = 2**30


@dataclass(frozen=True)
class ResumeRecord:
    """One mode's run: the first turn, the quit, and the turn after the restart."""

    mode: str
    history_tokens: int
    first_ttft_ms: float
    quit_ms: float  # closing the engine (with the tier: writing every slot's KV)
    prompt_tokens: int  # the turn after the restart
    cached_tokens: int
    cached_from: str | None
    ttft_ms: float
    disk_bytes: int


def run_resume_bench(loaded: LoadedModel, max_tokens: int = RESUME_TOKENS) -> list[ResumeRecord]:
    """The same chat, restarted with the disk tier and without it."""
    opening = openings(loaded.tokenizer, 1, RETURN_NOTES)[0]
    question = list(loaded.tokenizer.encode("\n\nAnd then? Say more.", add_special_tokens=False))
    with tempfile.TemporaryDirectory(prefix="mlxchat-resume-") as scratch:
        return [_play(loaded, mode, budget, Path(scratch) / mode, opening, question, max_tokens)
                for mode, budget in (("disk", DISK_BUDGET), ("no disk", 0))]


def _play(
    loaded: LoadedModel, mode: str, budget: int, folder: Path, opening: list[int], question: list[int], max_tokens: int
) -> ResumeRecord:
    from mlxchat.engine.events import SamplingParams
    from mlxchat.engine.kv.disk import DiskTier
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.plan import SlotRequest

    per_slot = -(-(len(opening) + len(question) + 2 * max_tokens + 1) // CTX_ROUNDING) * CTX_ROUNDING
    plan = loaded.facts.evaluate(SlotRequest(1, per_slot, parallel_max=1, per_slot_floor=0, per_slot_min=per_slot),
                            capped=False)
    sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True)

    def start() -> Engine:
        return Engine(loaded.ready, plan,
                      disk=DiskTier(folder, budget, loaded.kv_key))

    engine = start()
    try:
        # Warm-up, in the slot the chat then takes over (a short prompt, not a prefix of the chat's).
        engine.submit(0, tokens=question * 4, sampling=SamplingParams(max_tokens=2)).result()
        engine.clear(0, park=False)
        first = engine.submit(0, tokens=opening, sampling=sampling).result()
        history = engine.call(lambda: list(engine.core.slots[0].history)).result()
    finally:
        quitting = time.perf_counter()
        engine.shutdown(timeout=60)
        quit_s = time.perf_counter() - quitting
    engine = start()  # the next launch
    try:
        prompt = history + question
        done = engine.submit(0, tokens=prompt, sampling=sampling).result()
    finally:
        engine.shutdown(timeout=60)
    if first.error or done.error:
        raise RuntimeError(first.error or done.error)
    return ResumeRecord(
        mode=mode,
        history_tokens=len(history),
        first_ttft_ms=1000 * first.stats.ttft_s,
        quit_ms=1000 * quit_s,
        prompt_tokens=len(prompt),
        cached_tokens=done.stats.cached_tokens,
        cached_from=done.stats.cached_from,
        ttft_ms=1000 * done.stats.ttft_s,
        disk_bytes=sum(f.stat().st_size for f in folder.rglob("*.safetensors")),
    )


def format_resume_table(model: str, device: str, records: list[ResumeRecord]) -> str:
    """The records as an aligned table, with the speed-up the tier gives."""
    columns = ("mode", "history tok", "1st-turn TTFT ms", "quit ms", "prompt tok", "cached tok", "from",
               "TTFT ms", "on disk MiB")
    rows = [
        (r.mode, str(r.history_tokens), f"{r.first_ttft_ms:.0f}", f"{r.quit_ms:.0f}", str(r.prompt_tokens),
         str(r.cached_tokens), r.cached_from or "-", f"{r.ttft_ms:.0f}", f"{r.disk_bytes / 2**20:.1f}")
        for r in records
    ]
    lines = aligned(columns, rows)
    by_mode = {r.mode: r for r in records}
    footer = []
    if "disk" in by_mode and "no disk" in by_mode and by_mode["disk"].ttft_ms > 0:
        disk, none = by_mode["disk"], by_mode["no disk"]
        footer.append(
            f"after a restart: {100 * disk.cached_tokens / disk.prompt_tokens:.0f}% of the prompt read from disk; "
            f"first token {none.ttft_ms / disk.ttft_ms:.1f}x sooner than prefilling it "
            f"({disk.ttft_ms / disk.first_ttft_ms:.2f} of the time the history first took)"
        )
    return "\n".join([f"model {model} | device {device} | a chat reopened after a restart", *lines, *footer])

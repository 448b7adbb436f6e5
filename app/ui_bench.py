"""What the chat UI costs the engine, for `mlxchat bench --ui`.

The real app runs headless with N chats in the grid. The same engine plays the same requests
twice per round: once submitted directly (no UI work), once typed into the N chat panes, which
stream, render Markdown and refresh their status lines. Meanwhile a key is typed into a chat's
input every KEY_INTERVAL_S and the time until the input holds it is recorded.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from dataclasses import dataclass, field

from textual import events

from app.chat_app import ChatApp
from app.chat_pane import ChatInput, ChatPane
from app.config import Settings
from engine.bench import SCENARIOS
from engine.events import Done, Event

KEY_INTERVAL_S = 0.2
READY_TIMEOUT_S = 600.0


@dataclass
class RoundResult:
    """One play of the requests: generated tokens and the wall time from first send to last done."""

    tokens: int
    seconds: float

    @property
    def tok_s(self) -> float:
        """Aggregate generation speed."""
        return self.tokens / self.seconds if self.seconds else 0.0


@dataclass
class UiBenchResult:
    """Headless and with-UI rounds, and the key latencies measured during the UI rounds."""

    slots: int
    headless: list[RoundResult] = field(default_factory=list)
    with_ui: list[RoundResult] = field(default_factory=list)
    key_latencies_s: list[float] = field(default_factory=list)

    def table(self) -> str:
        """The result as the command prints it."""
        head = statistics.median(r.tok_s for r in self.headless)
        ui = statistics.median(r.tok_s for r in self.with_ui)
        keys = sorted(self.key_latencies_s) or [0.0]
        p95 = keys[min(len(keys) - 1, round(0.95 * (len(keys) - 1)))]
        return "\n".join([
            f"{self.slots} chats streaming; aggregate tok/s = generated tokens / (last reply done - first send)",
            f"  headless engine   {head:7.1f} tok/s   (rounds: {', '.join(f'{r.tok_s:.1f}' for r in self.headless)})",
            f"  app with {self.slots} panes  {ui:7.1f} tok/s   (rounds: {', '.join(f'{r.tok_s:.1f}' for r in self.with_ui)})",
            f"  UI / headless     {ui / head:7.2f}",
            f"  key press -> input: p50 {statistics.median(keys) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
            f"max {keys[-1] * 1000:.0f} ms over {len(self.key_latencies_s)} keys",
        ])


def run_ui_bench(settings: Settings, slots: int, repeats: int) -> UiBenchResult:
    """Plays `repeats` rounds of each kind, alternating, in the real app on `settings`' model."""
    prompts = [chat[-1]["content"] for chat in SCENARIOS["short"](slots)]
    system = SCENARIOS["short"](1)[0][0]["content"]
    settings = settings.model_copy(update={"parallel": slots, "system_prompt": system})
    app = ChatApp(settings)
    result = UiBenchResult(slots)

    async def main() -> None:
        async with app.run_test(size=(200, 60)) as pilot:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not (app.engine and app.chat_panes):
                if app.failed or time.monotonic() > deadline:
                    raise RuntimeError("the app did not start: run `mlxchat doctor`")
                await pilot.pause(0.1)
            await app.action_close_chat()
            for _ in range(repeats):
                result.headless.append(await asyncio.to_thread(_headless_round, app, prompts, system))
                result.with_ui.append(await _ui_round(app, pilot, prompts, result.key_latencies_s))

    asyncio.run(main())
    return result


def _headless_round(app: ChatApp, prompts: list[str], system: str) -> RoundResult:
    """Submits every prompt straight to the engine and waits for all replies (no widget sees them)."""
    engine = app.engine
    assert engine is not None
    done = threading.Event()
    finished: list[Done] = []

    def on_event(event: Event) -> None:
        if isinstance(event, Done):
            finished.append(event)
            if len(finished) == len(prompts):
                done.set()

    for slot in range(len(prompts)):
        engine.clear(slot)  # the UI round must not find these prompts cached, nor this one the UI's
    start = time.perf_counter()
    for slot, prompt in enumerate(prompts):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        engine.submit(slot, messages, sampling=app.sampling, on_event=on_event)
    done.wait()
    return RoundResult(sum(d.stats.generated_tokens for d in finished), time.perf_counter() - start)


async def _ui_round(app: ChatApp, pilot, prompts: list[str], latencies: list[float]) -> RoundResult:
    """Opens a chat per prompt in the grid, sends them all, types keys while they stream, closes them."""
    for _ in prompts:
        await app.action_new_chat()
    if not app.query_one("#chats").has_class("-grid"):
        app.action_toggle_grid()
    panes = app.chat_panes
    await pilot.pause()
    start = time.perf_counter()
    for pane, prompt in zip(panes, prompts):
        pane.chat_input.post_message(ChatInput.Submitted(prompt))
    while not any(p.busy for p in panes):
        await asyncio.sleep(0.01)
    while any(p.busy for p in panes):
        latencies.append(await _key_latency(app, panes[0]))
        await asyncio.sleep(KEY_INTERVAL_S)
    seconds = time.perf_counter() - start
    tokens = sum(p.last_stats.generated_tokens for p in panes if p.last_stats is not None)
    for _ in panes:
        await app.action_close_chat()
    return RoundResult(tokens, seconds)


async def _key_latency(app: ChatApp, pane: ChatPane) -> float:
    """Types one character as the terminal driver would and returns how long until the input holds it."""
    pane.focus_input()
    box = pane.chat_input
    before = box.text
    start = time.perf_counter()
    app.post_message(events.Key("x", "x"))
    while box.text == before:
        await asyncio.sleep(0.001)
    latency = time.perf_counter() - start
    box.text = ""
    return latency

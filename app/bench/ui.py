"""What the chat UI costs the engine, for `mlxchat bench --ui`.

The real app runs headless with N chats in the grid. The same engine plays the same requests
twice per round: once submitted directly (no UI work), once typed into the N chat panes, which
stream, render Markdown and refresh their status lines. Meanwhile a key is pressed in a chat's
input every KEY_INTERVAL_S (a letter, then backspace) and the time until the input's text changed
is recorded.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events
from textual.message import Message

from mlxchat.app.bench.gil_waits import Clocks, GilWaits, Split
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.workarounds.gc_hold import COLLECT_AFTER_S
from mlxchat.app.ui.widgets.chat_input import ChatInput
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.app.config.settings import Settings
from mlxchat.engine import Done, Event
from mlxchat.engine.bench import SCENARIOS

if TYPE_CHECKING:
    from mlxchat.engine.bench import Engine

KEY_INTERVAL_S = 0.2
# A letter, then backspace, as a user typing and correcting: the input's text stays one line.
TYPED = (("x", "x"), ("backspace", None))
SAMPLE_INTERVAL_S = 0.05
READY_TIMEOUT_S = 600.0
SETTLE_S = COLLECT_AFTER_S + 0.5
KEY_TIMEOUT_S = 10.0


@dataclass
class RoundResult:
    """One play of the requests: generated tokens, the wall time from first send to last done, the
    engine's aggregate decode rate while every request was decoding, and the share of a core the UI
    thread used meanwhile (None where the platform cannot read another thread's CPU clock)."""

    tokens: int
    seconds: float
    decode_tok_s: float
    ui_cpu_share: float | None

    @property
    def tok_s(self) -> float:
        """Aggregate generation speed, wall time."""
        return self.tokens / self.seconds if self.seconds else 0.0


class SteadyRate:
    """Watches the engine's snapshot from a thread of its own: tokens generated per second while
    all `slots` slots decode, so how fast the requests were sent does not count; and the CPU the UI
    (the main thread, where the app runs) used in that window."""

    def __init__(self, engine: Engine, slots: int) -> None:
        self._engine, self._slots = engine, slots
        self._ui_clock = _cpu_clock(threading.main_thread().ident)
        self._stop = threading.Event()
        self._window: list[tuple[float, int, float]] = []
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            slots = self._engine.snapshot().slots[: self._slots]
            if all(s.state == "decoding" for s in slots):
                ui_cpu = time.clock_gettime(self._ui_clock) if self._ui_clock is not None else 0.0
                self._window.append((time.perf_counter(), sum(s.generated for s in slots), ui_cpu))
            elif self._window:
                return  # a reply ended: the steady part is over

    def stop(self) -> tuple[float, float | None]:
        """Stops watching; the rate over the steady window (0 when there was none) and the UI
        thread's share of a core over it."""
        self._stop.set()
        self._thread.join()
        if len(self._window) < 2:
            return 0.0, None
        (t0, n0, c0), (t1, n1, c1) = self._window[0], self._window[-1]
        return (n1 - n0) / (t1 - t0), (c1 - c0) / (t1 - t0) if self._ui_clock is not None else None


def _cpu_clock(thread_id: int | None) -> int | None:
    """The CPU-time clock of a thread, where the platform has one (Linux; not macOS)."""
    try:
        return time.pthread_getcpuclockid(thread_id or 0)
    except (AttributeError, OSError):
        return None


@dataclass
class UiBenchResult:
    """Headless and with-UI rounds, and the key latencies measured during the UI rounds."""

    slots: int
    headless: list[RoundResult] = field(default_factory=list)
    with_ui: list[RoundResult] = field(default_factory=list)
    key_latencies_s: list[float] = field(default_factory=list)
    slowest_key: Split | None = None  # where the slowest key's time went (None where it cannot be read)
    gil_waits: GilWaits = field(default_factory=GilWaits)  # the UI thread's, during a UI round of its own

    def table(self) -> str:
        """The result as the command prints it."""
        keys = sorted(self.key_latencies_s) or [0.0]
        p95 = keys[min(len(keys) - 1, round(0.95 * (len(keys) - 1)))]
        lines = [
            f"{self.slots} chats, medians of {len(self.headless)} rounds each     headless   with UI   UI/headless",
        ]
        for label, metric in (
            ("decode tok/s while all decode (engine snapshot)", lambda r: r.decode_tok_s),
            ("tok/s, first send to last reply done", lambda r: r.tok_s),
        ):
            head = statistics.median(metric(r) for r in self.headless)
            ui = statistics.median(metric(r) for r in self.with_ui)
            lines.append(f"  {label:<46} {head:8.1f}  {ui:8.1f}  {ui / head if head else 0:10.2f}")
        # (each round's pair, played one after the other: how far the rounds stray from the medians above)
        ratios = [u.tok_s / h.tok_s for h, u in zip(self.headless, self.with_ui) if h.tok_s]
        if ratios:
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            lines.append(f"  {'first send to last reply done, each round':<46} {'':8}  {'':8}  {spread:>10}")
        shares = [[r.ui_cpu_share for r in rounds if r.ui_cpu_share is not None]
                  for rounds in (self.headless, self.with_ui)]
        if all(shares):
            head, ui = (statistics.median(s) * 100 for s in shares)
            lines.append(f"  {'UI thread while all decode, % of a core':<46} {head:8.0f}  {ui:8.0f}")
        lines.append(
            f"  key press -> text in the input: p50 {statistics.median(keys) * 1000:.0f} ms, "
            f"p95 {p95 * 1000:.0f} ms, max {keys[-1] * 1000:.0f} ms ({len(self.key_latencies_s)} keys)"
        )
        if self.slowest_key is not None:
            lines.append(f"  the slowest key, {self.slowest_key.words()}")
        if self.gil_waits.longest_s is not None:
            lines.append(f"  the UI thread's longest wait for the GIL while chats streamed: "
                         f"{self.gil_waits.longest_s * 1000:.0f} ms")
        return "\n".join(lines)


def run_ui_bench(settings: Settings, slots: int, repeats: int, db_path: Path) -> UiBenchResult:
    """Plays `repeats` rounds of each kind, alternating, in the real app on `settings`' model, then one UI round
    more that watches the GIL (neither its keys nor its rates counted); the bench's chats are saved in `db_path`, not
    among the user's."""
    prompts = [chat[-1]["content"] for chat in SCENARIOS["short"](slots)]
    system = SCENARIOS["short"](1)[0][0]["content"]
    settings = settings.model_copy(update={"parallel": slots, "system_prompt": system})
    result = UiBenchResult(slots)
    app = ChatApp(settings, db_path)
    ends = ReplyEnds()

    async def main() -> None:
        async with app.run_test(size=(200, 60), message_hook=ends.seen) as pilot:
            deadline = time.monotonic() + READY_TIMEOUT_S
            # Until the first chat's box has the keyboard: the last thing its opening does (its tab shows before).
            while not (app.session.engine and app.active_chat and isinstance(app.focused, ChatInput)):
                if app.failed or time.monotonic() > deadline:
                    raise RuntimeError("the app did not start: run `mlxchat doctor`")
                await pilot.pause(0.1)
            await app.close_chat(app.chat_panes[0])
            for _ in range(repeats):
                # The app settles first: the full collection it owes after replies ended (run by then) would
                # hold the GIL in the middle of the headless round, slowing the engine there and not in the UI's.
                await pilot.pause(SETTLE_S)
                result.headless.append(await asyncio.to_thread(_headless_round, app, prompts, system))
                result.with_ui.append(await _ui_round(app, pilot, prompts, ends, result))
            # One more UI round, its keys and rates not counted, watches the GIL: its 200 wakes a second cost the UI thread
            # 4-5 % of a core (13-14 % against 17-19 with the AVX2 path forced, 8 chats), taken from the engine.
            await pilot.pause(SETTLE_S)
            await _ui_round(app, pilot, prompts, ends, result, watch=result.gil_waits)

    asyncio.run(main())
    return result


def _headless_round(app: ChatApp, prompts: list[str], system: str) -> RoundResult:
    """Submits every prompt straight to the engine and waits for all replies (no widget sees them)."""
    engine = app.session.engine
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
    steady = SteadyRate(engine, len(prompts))
    for slot, prompt in enumerate(prompts):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        engine.submit(slot, messages, sampling=app.sampling, on_event=on_event)
    done.wait()
    seconds = time.perf_counter() - start
    return RoundResult(sum(d.stats.generated_tokens for d in finished), seconds, *steady.stop())


class ReplyEnds:
    """Textual's message hook for the UI rounds: sees each chat's reply end (ChatPane.Finished, as the chat
    handles it, before the screen update that shows it), so that a round ends with that update, not with
    a look every few milliseconds (which could miss it by a screen update)."""

    def __init__(self) -> None:
        self._waiting: set[ChatPane] = set()
        self._shown: asyncio.Future[float] | None = None

    def expect(self, panes: list[ChatPane]) -> asyncio.Future[float]:
        """Done with the moment (perf_counter) the screen has shown the last of `panes`' replies ended."""
        self._waiting = set(panes)
        self._shown = asyncio.get_running_loop().create_future()
        return self._shown

    def seen(self, message: Message) -> None:
        if isinstance(message, ChatPane.Finished) and message.pane in self._waiting:
            self._waiting.discard(message.pane)
            if not self._waiting and self._shown is not None:
                shown = self._shown
                message.pane.app.call_after_refresh(lambda: shown.set_result(time.perf_counter()))


async def _ui_round(app: ChatApp, pilot, prompts: list[str], ends: ReplyEnds, result: UiBenchResult,
                    watch: GilWaits | None = None) -> RoundResult:
    """Opens a chat per prompt in the grid, sends them all, types keys while they stream (`watch` watching the GIL
    meanwhile), closes them."""
    for _ in prompts:
        await app.action_new_chat()
    if not app.query_one("#chats").has_class("-grid"):
        app.action_toggle_grid()
    panes = app.chat_panes
    # The keys go to the first chat: focused now, as a user types in the chat they are in (moving
    # the focus repaints the whole screen, which is not what a key press costs).
    panes[0].focus_input()
    for _ in range(100):  # (its tab becomes the active one: a repaint of every chat)
        if app.active_chat is panes[0] and app.focused is panes[0].chat_input:
            break
        await pilot.pause(0.05)
        panes[0].focus_input()
    assert app.session.engine is not None
    shown = ends.expect(panes)
    start = time.perf_counter()
    steady = SteadyRate(app.session.engine, len(prompts))
    for pane, prompt in zip(panes, prompts):
        pane.chat_input.post_message(ChatInput.Submitted(prompt))
    # The typed-in chat clears its input as it sends: keys typed before then could be cleared away.
    while not panes[0].busy:
        await asyncio.sleep(0.01)
    typed = itertools.cycle(TYPED)
    if watch is not None:
        watch.start()
    while not shown.done():
        wall, split = await _key_latency(app, panes[0], *next(typed))
        if watch is None:  # (a watched round's keys wait on the watcher's wakes too)
            result.key_latencies_s.append(wall)
            if split and (result.slowest_key is None or wall > result.slowest_key.wall):
                result.slowest_key = split
        await asyncio.wait([shown], timeout=KEY_INTERVAL_S)
        if not any(p.busy for p in panes) and not (await asyncio.wait([shown], timeout=KEY_TIMEOUT_S))[0]:
            raise RuntimeError("a chat's turn ended without a reply shown (did the engine refuse a prompt?)")
    if watch is not None:
        await watch.stop()
    seconds = shown.result() - start
    rate, ui_cpu = steady.stop()
    tokens = sum(p.last_stats.generated_tokens for p in panes if p.last_stats is not None)
    for pane in panes:
        await app.close_chat(pane)
    return RoundResult(tokens, seconds, rate, ui_cpu)


async def _key_latency(app: ChatApp, pane: ChatPane, key: str, character: str | None) -> tuple[float, Split | None]:
    """Presses `key` as the terminal driver would; how long until the input's text changed, and where that time went
    (None where the thread's clocks cannot be read)."""
    pane.focus_input()
    box = pane.chat_input
    before = box.text
    clocks = Clocks.read()
    start = time.perf_counter()
    app.post_message(events.Key(key, character))
    while box.text == before:
        if time.perf_counter() - start > KEY_TIMEOUT_S:
            raise RuntimeError(f"the key {key!r} did not reach the chat's input in {KEY_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.001)
    wall = time.perf_counter() - start
    after = Clocks.read()
    if clocks is None or after is None:
        return wall, None
    split = Split.between(clocks, after)
    return split.wall, split

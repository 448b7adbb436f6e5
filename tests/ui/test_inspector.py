"""The slot inspector (F3): Pilot on the real app and the tiny model; a screenshot from a fixed snapshot."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.inspector import REFRESH_S, InspectorScreen, SlotDetailScreen, SlotTable
from mlxchat.app.ui.widgets.slot_rates import SlotRates, recent_rates
from mlxchat.engine.events import EngineSnapshot, ParkedSnapshot, SamplingParams, SlotSnapshot
from tests.markers import needs_cpu
from tests.pilot import HeldWhen, make_app, notes, ready, run, send, two_replies_held, wait_for


def slots(app: ChatApp) -> tuple[SlotSnapshot, ...]:
    """The slots as the engine has them now."""
    assert app.session.engine is not None
    return app.session.engine.snapshot().slots


def states_shown(screen: InspectorScreen) -> list[str]:
    """The State column as the table shows it."""
    table = screen.query_one(SlotTable)
    return [table.get_cell(str(row), "state").plain for row in range(table.row_count)]


async def open_inspector(app: ChatApp, pilot: Pilot) -> InspectorScreen:
    await pilot.press("f3")
    await wait_for(pilot, lambda: isinstance(app.screen, InspectorScreen), "the inspector")
    assert isinstance(app.screen, InspectorScreen)
    return app.screen


def test_navigate_cancel_one_reply_and_go_to_a_chat(endless_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        # Held with both replies half-written: the keys meet the slots in a known state, on any machine.
        first, second, hold = await two_replies_held(app, pilot)
        screen = await open_inspector(app, pilot)
        table = screen.query_one(SlotTable)
        await wait_for(pilot, lambda: states_shown(screen) == ["decoding", "decoding", "idle"], "two slots decoding")
        # A chat is named after its first message (the store's titles), once it is sent: the slot takes the
        # name when the app has handled the chat's Retitled and the engine the bind, a refresh or two later.
        titles = [first.chat_title, second.chat_title, "no chat"]
        assert table.cursor_row == 0
        for key, row in (("j", 1), ("j", 2), ("k", 1), ("down", 2), ("up", 1), ("k", 0)):
            await pilot.press(key)
            assert table.cursor_row == row, key
        await pilot.press("c")  # stops slot 0's reply: Chat 1's only
        # Let go once slot 0's reply has stopped, and held again while slot 1's goes on.
        hold.release()
        hold = HeldWhen(app, lambda core: core.slots[0].request is None and core.slots[1].request is not None)
        await hold.held()
        await wait_for(pilot, lambda: not first.busy, "the stop")
        assert notes(first) == ["(stopped)"]
        assert first.chat.messages[-1].role == "assistant" and first.chat.messages[-1].text
        assert second.busy
        await wait_for(pilot, lambda: states_shown(screen)[:2] == ["idle", "decoding"], "the table to follow")
        await wait_for(pilot, lambda: [str(table.get_cell(str(s), "chat")) for s in range(3)] == titles, "the titles")

        # The rows are refreshed in place: the cursor stays on its slot.
        await pilot.press("j")
        await pilot.pause(3 * REFRESH_S)
        assert table.cursor_row == 1
        # The streaming slot's sparkline has seen it generate.
        assert max(screen.query_one(SlotRates)._history[1]) > 0

        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, InspectorScreen), "the inspector to close")
        assert app.active_chat is second
        await pilot.pause()
        assert app.focused is second.chat_input
        hold.release()
        await wait_for(pilot, lambda: not second.busy, "the other reply")
        assert "(stopped)" not in notes(second) and second.chat.messages[-1].finish_reason == "length"

    run(make_app(endless_model_dir, parallel=3, ctx_size=6144, sampling={"max_tokens": 200}), scenario)


def test_clear_asks_first_then_frees_the_slot(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello, how are you today?")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        used = slots(app)[0].used
        assert used > 0
        kept = [(m.role, m.text) for m in pane.chat.messages]

        screen = await open_inspector(app, pilot)
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        question = str(app.screen.query_one("Static:last-of-type").render())
        assert f"holds {used} tokens" in question and f"{pane.chat_title} keeps its text" in question
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen is screen, "the inspector again")
        await pilot.pause(0.1)
        assert slots(app)[0].used == used

        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await wait_for(pilot, lambda: slots(app)[0].used == 0, "the slot's KV to be freed")
        assert slots(app)[0].kv_bytes_used == 0
        assert app.screen is screen
        assert [(m.role, m.text) for m in pane.chat.messages] == kept

        # The next turn prefills the whole conversation again and still gets its reply.
        await pilot.press("escape")
        await send(pilot, pane, "And tomorrow?")
        await wait_for(pilot, lambda: not pane.busy, "the second reply")
        assert [m.role for m in pane.chat.messages] == ["user", "assistant", "user", "assistant"]

    run(make_app(tiny_model_dir, sampling={"max_tokens": 16}), scenario)


def test_detail_a_slot_without_chat_and_closing(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        screen = await open_inspector(app, pilot)
        table = screen.query_one(SlotTable)

        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, SlotDetailScreen), "the detail")
        detail = str(app.screen.query_one("#slot-detail").render())
        for field in ("id", "state", "capacity", "used", "prompt_tokens", "prompt_processed", "cached_tokens",
                      "generated", "tok_s", "sampling", "kv_bytes_allocated", "kv_bytes_used", "label"):
            assert field in detail
        assert pane.chat_title in detail
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "the inspector again")

        # Slot 1 has no chat: Enter says so and the inspector stays.
        await pilot.press("j", "enter")
        await pilot.pause()
        assert app.screen is screen and table.cursor_row == 1
        # Nothing to stop, nothing to clear: no question is asked.
        await pilot.press("c", "x")
        await pilot.pause()
        assert app.screen is screen

        await pilot.press("f3")
        await wait_for(pilot, lambda: not isinstance(app.screen, InspectorScreen), "F3 to close it")
        await open_inspector(app, pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, InspectorScreen), "escape to close it")
        assert app.focused is app.chat_panes[0].chat_input

    run(make_app(tiny_model_dir), scenario)


class FixedSlots:
    """The screenshot's slots: a snapshot of fixed figures (live ones change run to run). Nothing else: what the
    inspector's keys and mouse do is tested on the real engine."""

    def __init__(self, snapshot: EngineSnapshot) -> None:
        self.fixed = snapshot

    def snapshot(self) -> EngineSnapshot:
        return self.fixed

    def cancel_slot(self, slot: int) -> None:
        raise AssertionError("the screenshot presses no key that acts on a slot")

    clear_slot = cancel_slot

    def queue_titles(self) -> list[str]:
        return ["Chat 5", "Chat 6"]


MIB = 1024 * 1024


def fixed_snapshot() -> EngineSnapshot:
    """Four slots of 2048 tokens: one decoding, one in prefill, one idle with its cache, one free."""
    chat = SamplingParams(temperature=0.7, top_p=0.95, top_k=40, max_tokens=1024, seed=42)
    kv_slot, per_token = 24 * MIB, 12 * 1024
    slot = dict(capacity=2048, kv_bytes_allocated=kv_slot)
    slots = (
        SlotSnapshot(id=0, state="decoding", used=812, prompt_tokens=388, prompt_processed=388, cached_tokens=310,
                     generated=424, tok_s=31.4, sampling=chat, kv_bytes_used=812 * per_token,
                     label="Chat 1", **slot),
        SlotSnapshot(id=1, state="prefill", used=640, prompt_tokens=1500, prompt_processed=640, cached_tokens=0,
                     generated=0, tok_s=0.0, sampling=SamplingParams(max_tokens=256), kv_bytes_used=640 * per_token,
                     label="Chat 2", **slot),
        SlotSnapshot(id=2, state="idle", used=1730, prompt_tokens=0, prompt_processed=0, cached_tokens=0,
                     generated=0, tok_s=28.9, sampling=None, kv_bytes_used=1730 * per_token,
                     label="Chat 3", **slot),
        SlotSnapshot(id=3, state="idle", used=0, prompt_tokens=0, prompt_processed=0, cached_tokens=0,
                     generated=0, tok_s=0.0, sampling=None, kv_bytes_used=0, label=None, **slot),
    )
    return EngineSnapshot(
        model="SmolLM2-135M-Instruct", device="cpu (x86_64)", blas="openblas", dtype="float32",
        weights_bytes=513 * MIB, kv_bytes_allocated=4 * kv_slot, kv_bytes_used=sum(s.kv_bytes_used for s in slots),
        active_bytes=640 * MIB, peak_bytes=702 * MIB, aggregate_tok_s=31.4, per_slot=2048, slots=slots,
        batching="batched replies match each prompt's alone (float32, full precision)",
        parked=(ParkedSnapshot("Chat 5", 1210, 1210 * per_token), ParkedSnapshot("Chat 4", 96, 96 * per_token)),
        park_budget_bytes=1024 * MIB, kv_dtype="float16",
    )


@needs_cpu  # (the accepted screen holds what the CPU computes)
@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
def test_inspector_with_several_slots_busy(ascii_model_dir: Path, snap_compare: Any, size: tuple[int, int]) -> None:
    """The real app with the inspector open over it, reading a fixed snapshot; the cursor on slot 1."""
    app = make_app(ascii_model_dir)

    async def run_before(pilot: Pilot) -> None:
        await ready(app, pilot)
        await app.push_screen(InspectorScreen(FixedSlots(fixed_snapshot())))
        await pilot.press("j")

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_the_table_fits_the_screen_leaving_out_columns_it_names(tiny_model_dir: Path) -> None:
    """At 120 columns every column but the slots' KV; at 80 (the terminal made smaller while it is open) the first
    ones, whole; no column cut at the edge."""
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        snapshot = fixed_snapshot()
        long_title = replace(snapshot.slots[0], label="Write a long story… #2")  # as long as a tab's title gets
        await app.push_screen(InspectorScreen(FixedSlots(replace(snapshot, slots=(long_title, *snapshot.slots[1:])))))
        for size in ((120, 40), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, InspectorScreen)
            table = screen.query_one(SlotTable)
            headings = [column.label.plain for column in table.columns.values()]
            assert table.max_scroll_x == 0 and table.virtual_size.width <= size[0], size
            left_out = str(screen.query_one("#inspector-left-out", Static).render())
            if size[0] == 120:
                assert headings[-1] == "Sampling" and "KV used / allocated" not in headings
                assert left_out == "Left out at this width: KV used / allocated · d shows them"
            else:
                assert headings[:4] == ["Slot", "Chat", "State", "Context used"] and "Sampling" in left_out
            assert [str(cell) for cell in table.get_row("0")[:2]] == ["0", "Write a long story… #2"]

    run(make_app(tiny_model_dir), scenario, (120, 40))


def test_keys_stop_and_clear_slots_and_the_rows_follow_a_repartition(endless_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second, hold = await two_replies_held(app, pilot)
        screen = await open_inspector(app, pilot)
        table = screen.query_one(SlotTable)
        await wait_for(pilot, lambda: states_shown(screen) == ["decoding", "decoding", "idle", "idle"], "the rows")
        await pilot.press("c", "j", "c")  # slots 0 and 1 are working
        await pilot.press("j", "c")  # slot 2 is idle: nothing to stop, nothing asked
        assert app.screen is screen and table.cursor_row == 2
        hold.release()
        await wait_for(pilot, lambda: not first.busy and not second.busy, "the stops")
        assert notes(first) == notes(second) == ["(stopped)"]
        await wait_for(pilot, lambda: states_shown(screen) == ["idle"] * 4, "the rows to follow")
        # Slot 1 still holds its chat's KV: x asks, y frees it.
        assert slots(app)[1].used > 0
        await pilot.press("k", "x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await wait_for(pilot, lambda: slots(app)[1].used == 0, "the slot's KV to be freed")
        assert slots(app)[0].used > 0 and app.screen is screen
        # Fewer slots (F2 applied while the inspector is open): the rows follow, the cursor moves to the last one.
        await pilot.press("j", "j")
        assert table.cursor_row == 3
        app.session.apply_plan(app.session.evaluate(replace(app.settings.slot_request(), parallel=2)), app)
        await wait_for(pilot, lambda: table.row_count == 2, "the rows of the new plan")
        assert table.cursor_row == 1 and len(slots(app)) == 2
        # (the rates' lines are removed and mounted again: both take a refresh of their own, the table's does not wait)
        await wait_for(pilot, lambda: len(screen.query_one(SlotRates).query("Sparkline")) == 2, "the rates' lines")

    run(make_app(endless_model_dir, parallel=4, ctx_size=8192, sampling={"max_tokens": 200}), scenario)


def test_the_mouse_selects_a_slot_and_a_second_click_goes_to_its_chat(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        screen = await open_inspector(app, pilot)
        table = screen.query_one(SlotTable)
        row_y = table.region.y + 1  # below the column headings
        await pilot.click(offset=(20, row_y + 3))
        assert table.cursor_row == 3 and app.screen is screen
        await pilot.click(offset=(20, row_y + 3))  # slot 3 has no chat: the inspector stays
        await pilot.pause()
        assert app.screen is screen
        await pilot.click(offset=(20, row_y))
        assert table.cursor_row == 0 and app.screen is screen
        await pilot.click(offset=(20, row_y))  # slot 0 is the chat's: its chat is shown
        await wait_for(pilot, lambda: not isinstance(app.screen, InspectorScreen), "the chat")
        assert app.active_chat is pane and app.focused is pane.chat_input

    run(make_app(tiny_model_dir, parallel=4, ctx_size=8192), scenario)


def test_cached_cell_marks_tokens_prefilled_again() -> None:
    """A window or recurrent model that could not roll back to an edited turn says so in the Cached column."""
    from mlxchat.app.ui.screens.inspector import slot_cells

    slot = fixed_snapshot().slots[0]
    assert slot_cells(slot)["cached"].plain == "310"
    again = slot_cells(replace(slot, cached_tokens=0, refilled_tokens=300))["cached"]
    assert (again.plain, str(again.style)) == ("0 (+300 again)", "yellow")


def test_a_slot_that_reasons_shows_thinking_with_its_reasoning_tokens() -> None:
    from mlxchat.app.ui.screens.inspector import slot_cells

    slot = fixed_snapshot().slots[0]
    cells = slot_cells(replace(slot, reasoning_tokens=300))
    assert (cells["state"].plain, cells["generated"].plain) == ("thinking", "424 / 1024 (300 thinking)")
    assert slot_cells(slot)["state"].plain == "decoding"  # its answer, or a model that does not reason


def test_a_slot_whose_reply_drafts_shows_how_many_drafted_tokens_the_model_took() -> None:
    from rich.console import Console

    from mlxchat.app.ui.screens.inspector import engine_figures, slot_cells

    slot = fixed_snapshot().slots[0]
    assert slot_cells(replace(slot, drafted=212, accepted=171))["generated"].plain == "424 / 1024 · drafts 81% of 212"
    assert slot_cells(slot)["generated"].plain == "424 / 1024"  # (a reply that drafts nothing; of its max_tokens)
    console = Console(width=200, record=True)
    console.print(engine_figures(replace(fixed_snapshot(), speculation="none for this model")))
    assert "Speculation none for this model" in console.export_text()


def test_recent_rates_are_tokens_since_the_last_snapshot() -> None:
    before = fixed_snapshot()
    later = [replace(s, generated=s.generated + 12) if s.id == 0 else s for s in before.slots]
    after = replace(before, slots=(*later, replace(later[0], id=4)))
    # Slot 0 made 12 tokens in half a second; the others none; slot 4 is new (repartitioned): 0.
    assert recent_rates(before, after, 0.5) == {0: 24.0, 1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}
    assert recent_rates(before, after, 0.0)[0] == 0.0

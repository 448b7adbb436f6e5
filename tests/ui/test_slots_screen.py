"""The slots screen (F2), driven with Pilot on the tiny model: live evaluation, apply, fewer slots, refusal."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.paths import default_config_path
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.widgets.slider import Slider
from mlxchat.app.session.seating import assign_slots
from mlxchat.app.ui.screens.slots import SlotsScreen
from tests.markers import AUTO_KV
from tests.pilot import make_app, notes, ready, run, send, wait_for

# The tiny llama's floor (8 slots of 1,024 tokens) and its plan's KV, in the type "auto" stores K/V in here.
FLOOR_KV = "2.0 MiB of KV in float16" if AUTO_KV else "4.0 MiB of KV in the model's own type"


@pytest.fixture(autouse=True)
def _own_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Applying writes the config file: each test gets its own, so none sees another's values."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def text(screen: SlotsScreen, selector: str) -> str:
    """What a line of the screen reads ("" when it is hidden)."""
    widget = screen.query_one(selector, Static)
    return str(widget.render()) if widget.display else ""


async def open_slots(app: ChatApp, pilot: Pilot) -> SlotsScreen:
    await pilot.press("f2")
    await wait_for(pilot, lambda: isinstance(app.screen, SlotsScreen), "the slots screen")
    await pilot.pause()
    assert isinstance(app.screen, SlotsScreen)
    return app.screen


async def type_total(pilot: Pilot, screen: SlotsScreen, total: str) -> None:
    """Replaces the total context as a person would: focus the box, clear it, type."""
    box = screen.query_one("#slots-total", Input)
    box.focus()
    await pilot.press("end", *["backspace"] * len(box.value), *total)
    await pilot.pause()


def test_assign_slots_keeps_slots_then_fills_free_ones_in_tab_order() -> None:
    assert assign_slots([0, 1, 2, 3], 2) == [0, 1, None, None]
    assert assign_slots([0, 3, None, 1], 3) == [0, 2, None, 1]
    assert assign_slots([None, 0], 4) == [1, 0]


def test_slider_and_total_update_the_evaluation_before_apply(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        screen = await open_slots(app, pilot)
        slider = screen.query_one("#slots-n", Slider)
        assert app.focused is slider
        assert text(screen, "#slots-summary") == "8192 / 4 = 2048 tokens per slot"
        assert text(screen, "#slots-warnings") == ""
        await pilot.press("right", "right", "right", "right")
        assert slider.value == 8
        assert text(screen, "#slots-summary") == "8192 / 8 = 1024 tokens per slot"
        assert text(screen, "#slots-warnings") == ""
        await pilot.press("right")  # past the end it stays at parallel_max
        assert slider.value == 8
        await type_total(pilot, screen, "4096")
        assert text(screen, "#slots-summary") == "4096 / 8 = 512 tokens per slot"
        assert text(screen, "#slots-warnings") == (
            "⚠ 4096 / 8 = 512 tokens per slot is below 1024: a system prompt and a few turns may no longer fit (1024 "
            f"per slot for 8 slots takes {FLOOR_KV})"
        )
        assert not screen.query_one("#slots-apply", Button).disabled  # a warning still lets one apply
        slider.focus()
        await pilot.press("home")
        assert text(screen, "#slots-summary") == "4096 / 1 = 4096 tokens per slot"
        await pilot.press("end")
        assert slider.value == 8
        # The mouse: a click on the track's left end, then a drag to its right end.
        track_end = slider.content_region.width + 1  # the content starts after the border and padding
        await pilot.click(slider, offset=(2, 1))
        assert slider.value == 1
        await pilot.mouse_down(slider, offset=(2, 1))
        await pilot.hover(slider, offset=(track_end, 1))
        await pilot.mouse_up(slider, offset=(track_end, 1))
        assert slider.value == 8
        # The KV figure is the evaluation's own: constant in N for one total.
        kv = "1.0 MiB (128.0 KiB per slot) · float16, 256 B a token" if AUTO_KV else \
            "2.0 MiB (256.0 KiB per slot) · the model's own type, 512 B a token"
        assert text(screen, "#slots-kv") == f"KV cache: {kv}"
        for bad in ("", "0", "-5"):
            await type_total(pilot, screen, bad)
            assert "whole number of tokens above 0" in text(screen, "#slots-total-error")
            assert text(screen, "#slots-summary") == ""
            assert screen.query_one("#slots-apply", Button).disabled
        screen.query_one("#slots-total", Input).value = "lots"  # pasted text is not typed key by key
        await pilot.pause()
        assert "whole number of tokens above 0" in text(screen, "#slots-total-error")
        # Nothing was applied: the engine, the plan and the config file are as they were.
        assert len(app.session.engine.snapshot().slots) == 4
        assert app.session.plan is not None and app.session.plan.parallel == 4
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SlotsScreen), "the screen to close")
        assert len(app.session.engine.snapshot().slots) == 4 and app.session.plan.summary == "8192 / 4 = 2048 tokens per slot"
        assert not default_config_path().exists()

    run(make_app(tiny_model_dir, parallel=4, ctx_size=8192), scenario)


def test_apply_repartitions_the_engine_and_saves_the_values(tiny_model_dir: Path) -> None:
    config = default_config_path()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('system_prompt = "Be brief."\n\n[sampling]\ntop_k = 20\n')

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there")
        await wait_for(pilot, lambda: not pane.busy, "the first reply")
        used = app.session.engine.snapshot().slots[0].used
        assert used > 0
        screen = await open_slots(app, pilot)
        await pilot.press("right", "right")
        assert text(screen, "#slots-summary") == "4096 / 4 = 1024 tokens per slot"
        await pilot.click("#slots-apply")
        await wait_for(pilot, lambda: not isinstance(app.screen, SlotsScreen), "the apply")
        snapshot = app.session.engine.snapshot()
        assert len(snapshot.slots) == 4 and snapshot.per_slot == 1024
        assert app.session.plan is not None and app.session.plan.summary == "4096 / 4 = 1024 tokens per slot"
        assert app.sub_title.endswith("4096 / 4 = 1024 tokens per slot")
        assert snapshot.slots[0].label == pane.chat_title
        assert snapshot.slots[0].used == used  # the chat's KV cache came through
        saved = tomllib.loads(config.read_text())
        assert saved == {"system_prompt": "Be brief.", "parallel": 4, "ctx_size": 4096, "sampling": {"top_k": 20}}
        assert (app.settings.parallel, app.settings.ctx_size) == (4, 4096)  # the app runs on what it kept
        assert notes(pane)[-1] == "Slot 0 kept this chat's KV cache through the change of slots."
        await wait_for(pilot, lambda: "/ 1024 tokens" in pane.status_text, "the new capacity in the status")
        # The chat goes on in its slot.
        await send(pilot, pane, "And again")
        await wait_for(pilot, lambda: not pane.busy, "the second reply")
        assert [m.role for m in pane.chat.messages] == ["user", "assistant"] * 2

    run(make_app(tiny_model_dir, ctx_size=4096), scenario)


def test_fewer_slots_than_chats_asks_first_and_keeps_the_chats(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.press("ctrl+n", "ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 3, "three chats")
        third = app.chat_panes[2]
        await send(pilot, third, "Remember me")
        await wait_for(pilot, lambda: not third.busy, "the reply in chat 3")
        screen = await open_slots(app, pilot)
        await pilot.press("left", "left")
        assert text(screen, "#slots-summary") == "4096 / 2 = 2048 tokens per slot"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        question = str(app.screen.query_one(".confirm-question", Static).render())
        assert question.startswith("Apply 4096 / 2 = 2048 tokens per slot?")
        assert f"With 2 slots for 3 chats, {third.chat_title} loses its slot. Nothing is lost: it stays open" in question
        # Both buttons whole, inside the dialog (the plan in the Apply button once pushed Keep out: "Keep (").
        dialog = app.screen.query_one("ConfirmScreen > Vertical")
        for button in app.screen.query(Button).results(Button):
            assert button.region.right <= dialog.region.right and button.region.width >= len(str(button.label)) + 2
        await pilot.press("escape")  # cancel: everything stays as it was
        await wait_for(pilot, lambda: isinstance(app.screen, SlotsScreen), "back on the slots screen")
        assert len(app.session.engine.snapshot().slots) == 4 and [p.slot_id for p in app.chat_panes] == [0, 1, 2]
        titles = [p.chat_title for p in app.chat_panes]
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question again")
        await pilot.click("#confirm-yes")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1, "the apply")
        assert len(app.session.engine.snapshot().slots) == 2
        assert [p.chat_title for p in app.chat_panes] == titles
        assert [p.slot_id for p in app.chat_panes] == [0, 1, None]
        # A chat with turns says where they come back from when it gets a slot again.
        assert third.status_text == ("no slot · it borrows an idle one when you send; its history is read back "
                                     "where it is kept (parked, saved, in another slot), else prefilled again")
        assert third.chat.messages[0].text == "Remember me"
        assert notes(third)[-1].startswith("This chat has no slot now; its text is kept")
        # Sending from a chat without a slot borrows the least recently used idle one: chat 1's.
        first = app.chat_panes[0]
        await pilot.press("alt+3")
        await send(pilot, third, "Still there?")
        await wait_for(pilot, lambda: not third.busy, "the reply on the borrowed slot")
        assert third.chat.messages[-1].role == "assistant"
        assert [p.slot_id for p in app.chat_panes] == [None, 1, 0]
        assert first.status_text.startswith("no slot · slot 0 went to another chat")
        assert app.session.engine.snapshot().slots[0].label == third.chat_title
        # Closing a chat frees its slot, which the chat without one takes.
        await pilot.press("alt+2", "ctrl+w")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "chat 2 to close")
        assert [p.slot_id for p in app.chat_panes] == [1, 0]
        await wait_for(pilot, lambda: app.session.engine.snapshot().slots[1].label == first.chat_title, "the binding")

    run(make_app(tiny_model_dir, parallel=4, ctx_size=4096, sampling={"max_tokens": 16}), scenario)


def test_refused_plan_disables_apply_with_the_engines_message(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        screen = await open_slots(app, pilot)
        await pilot.press("end")
        await type_total(pilot, screen, "1024")
        assert text(screen, "#slots-errors") == (
            "✖ 1024 / 8 = 128 tokens per slot is below the minimum of 256: "
            "use fewer slots or a larger total context"
        )
        assert screen.query_one("#slots-apply", Button).disabled
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, SlotsScreen) and len(app.session.engine.snapshot().slots) == 2
        # More than 8 slots of the model's trained 4096 tokens: refused as the config would, not summarised.
        await type_total(pilot, screen, "40000")
        assert text(screen, "#slots-errors").startswith(
            "✖ ctx_size = 40000 (this screen) is more than the model can use"
        )
        assert text(screen, "#slots-summary") == "" and screen.query_one("#slots-apply", Button).disabled

    run(make_app(tiny_model_dir), scenario)


def test_a_config_file_that_cannot_be_written_is_reported_not_raised(tiny_model_dir: Path) -> None:
    # A file where the config folder should be: the save cannot create the config file.
    default_config_path().parent.parent.mkdir(parents=True)
    default_config_path().parent.write_text("not a folder")

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        shown: list[tuple[str, str]] = []
        notify = app.notify

        def recording_notify(message: str, **kwargs: Any) -> None:
            shown.append((message, kwargs.get("severity", "information")))
            notify(message, **kwargs)

        app.notify = recording_notify  # type: ignore[method-assign]
        await open_slots(app, pilot)
        await pilot.press("right", "ctrl+s")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1, "the apply")
        assert len(app.session.engine.snapshot().slots) == 3  # applied all the same
        assert [s for m, s in shown if m.startswith(f"Not saved to {default_config_path()}")] == ["error"]

    run(make_app(tiny_model_dir), scenario)


def test_sizes_that_an_open_chat_no_longer_fits_name_it_before_apply(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello there " * 40)
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        used = app.session.snapshot().slots[0].used
        screen = await open_slots(app, pilot)
        assert pane.chat_title not in text(screen, "#slots-warnings")
        await type_total(pilot, screen, str(2 * (used - 10)))  # two slots, each 10 tokens short of the chat
        warned = text(screen, "#slots-warnings")
        assert f"“{pane.chat_title}” holds {used} tokens, more than a slot of {used - 10}" in warned
        assert "its next message would be refused" in warned

    run(make_app(tiny_model_dir, parallel=2, ctx_size=4096, per_slot_min=32, per_slot_floor=64), scenario)


def test_the_kv_figure_counts_the_draft_model_s_kv_in_the_same_slots(tiny_model_dir: Path, tmp_path: Path) -> None:
    """With a draft model (draft_model), F2's KV total holds its K/V too, divided among the same slots: as long as
    theirs, for any N."""
    from tests.tiny_draft import build_draft

    draft = build_draft(tiny_model_dir, tmp_path / "draft", layers=1)
    # K and V x 2 heads x 16 values a layer, in the type "auto" stores K/V in here: the target's 2 layers, the draft's 1.
    value = 2 if AUTO_KV else 4
    target_token, draft_token = 2 * 2 * 2 * 16 * value, 1 * 2 * 2 * 16 * value
    kind = "float16" if AUTO_KV else "the model's own type"

    def kib(n: int) -> str:
        return f"{n / 1024:.1f} KiB"

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        screen = await open_slots(app, pilot)
        for n in (2, 3):
            per_slot = 2048 // n
            slot = per_slot * (target_token + draft_token)
            assert text(screen, "#slots-summary") == f"2048 / {n} = {per_slot} tokens per slot"
            assert text(screen, "#slots-kv") == (f"KV cache: {kib(n * slot)} ({kib(slot)} per slot) · {kind}, "
                                                 f"{target_token} B a token · the draft model's "
                                                 f"{kib(n * per_slot * draft_token)} included")
            await pilot.press("right")

    run(make_app(tiny_model_dir, parallel=2, ctx_size=2048, draft_model=str(draft)), scenario)

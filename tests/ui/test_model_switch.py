"""Another model without a restart, through Pilot: the picker lists the tiny models laid out in a temporary Hugging
Face cache; a switch while a reply streams asks first, stops it, keeps both chats and evaluates the slots again for the
new model; a model that cannot load leaves the old one running; a Hub id that is not here gets the offline message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, OptionList

from mlxchat.app.config.loading import load_settings
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.model_picker import ModelPickerScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from tests.pilot import HeldWhen, make_app, notes, open_second_chat, ready, run, send, submit, wait_for

TINY_ID = "tiny-org/tiny-llama"


@pytest.fixture
def hub_cache(tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache holding the tiny llama as `tiny-org/tiny-llama`, laid out as huggingface_hub does."""
    hub = tmp_path / "hub"
    repo = hub / "models--tiny-org--tiny-llama"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    return hub


async def open_picker(app: ChatApp, pilot: Pilot) -> ModelPickerScreen:
    await pilot.press("alt+m")
    await wait_for(pilot, lambda: isinstance(app.screen, ModelPickerScreen), "the model picker")
    assert isinstance(app.screen, ModelPickerScreen)
    return app.screen


def lines(picker: ModelPickerScreen) -> list[str]:
    options = picker.query_one(OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


def toasts(app: ChatApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def pick_typed(app: ChatApp, pilot: Pilot, typed: str) -> None:
    """Types `typed` in the picker's box and presses enter."""
    picker = await open_picker(app, pilot)
    picker.query_one(Input).value = typed
    await pilot.pause()
    await pilot.press("enter")


def test_a_switch_while_a_reply_streams_keeps_the_chats_and_plans_the_slots_again(
        long_model_dir: Path, hub_cache: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_second_chat(app, pilot)
        assert app.session.plan is not None and app.session.plan.per_slot == 8192
        await send(pilot, second, "Hello")  # (a reply of the long model, done)
        await wait_for(pilot, lambda: not second.busy, "the first model's reply")
        # A reply held half-written (let go when the switch retires its engine).
        hold = HeldWhen(app, lambda core: bool(core.slots[0].request and core.slots[0].request.generated >= 2))
        await submit(pilot, first, "Tell me a long story")
        await hold.held()
        picker = await open_picker(app, pilot)
        tiny = next(line for line in lines(picker) if TINY_ID in line)
        size = sum(f.stat().st_size for f in (hub_cache / "models--tiny-org--tiny-llama").rglob("*") if f.is_file())
        assert tiny == f"  {TINY_ID} · HF cache · {size / 1024:.1f} KiB · float32 · 4,096 tokens trained"
        picker.query_one(Input).value = "tiny-org"  # the filter
        await pilot.pause()
        assert lines(picker) == [tiny]
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.session.model_name == TINY_ID, "the switch")
        await wait_for(pilot, lambda: not first.busy, "the stopped reply")
        assert first.chat.messages[-1].finish_reason == "cancelled" and "(stopped)" in notes(first)
        assert app.chat_panes == [first, second]  # both chats open, with their turns
        assert [m.role for m in second.chat.messages] == ["user", "assistant"]
        # The slots for the new model: 16,384 / 2 is more than it was trained on.
        assert app.session.plan.per_slot == 4096 and app.sub_title.endswith("16384 / 2 = 4096 tokens per slot")
        said = toasts(app)
        assert "8192 tokens per slot is more than the model was trained on (4096): capped at 4096" in said
        assert any(t.startswith(f"Switched to {TINY_ID} in ") and "; 1 reply stopped" in t for t in said)
        assert any(n.startswith(f"The model is now {TINY_ID}") for n in notes(second))
        await send(pilot, second, "And now?")
        await wait_for(pilot, lambda: not second.busy, "the new model's reply")
        first_reply, second_reply = [m for m in second.chat.messages if m.role == "assistant"]
        assert (first_reply.model, second_reply.model) == (long_model_dir.name, TINY_ID)
        app.action_toggle_timings()
        await pilot.pause()
        assert str(second.query(".turn-timings").last().render()).endswith(f" · {TINY_ID}")

    run(make_app(long_model_dir, parallel=2, ctx_size=16384, sampling={"max_tokens": 4096}), scenario)


def test_a_model_that_cannot_load_leaves_the_old_one_running(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await pick_typed(app, pilot, str(broken))
        await wait_for(pilot, lambda: any("could not be loaded" in t for t in toasts(app)), "the failure")
        assert (f"broken-model could not be loaded: {broken} is not an MLX model folder (it has no config.json).\n"
                f"{tiny_model_dir.name} keeps running.") in toasts(app)
        assert app.session.model_name == tiny_model_dir.name
        await send(pilot, pane, "Still there?")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        assert pane.chat.messages[-1].text and pane.chat.messages[-1].model == tiny_model_dir.name

    run(make_app(tiny_model_dir), scenario)


def test_a_hub_id_not_here_says_it_cannot_be_downloaded_offline(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pick_typed(app, pilot, "someone/not-here")
        await wait_for(pilot, lambda: any("could not be loaded" in t for t in toasts(app)), "the failure")
        [said] = [t for t in toasts(app) if "could not be loaded" in t]
        assert said.startswith("someone/not-here could not be loaded: someone/not-here is not downloaded yet, and "
                               "Hugging Face could not be reached (HF_HUB_OFFLINE is set).")
        assert app.session.model_name == tiny_model_dir.name

    run(make_app(tiny_model_dir), scenario)


def test_the_config_keeps_the_model_only_when_asked(tiny_model_dir: Path, hub_cache: Path,
                                                   tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'model = "{tiny_model_dir}"\nparallel = 2\nctx_size = 2048\n')

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        picker = await open_picker(app, pilot)
        picker.query_one(Input).value = "tiny-org"
        await pilot.pause()
        await pilot.press("ctrl+s")  # switched, and kept for the next start
        await wait_for(pilot, lambda: app.session.model_name == TINY_ID, "the switch")
        assert load_settings(config).model == TINY_ID and config.read_text().startswith(f'model = "{TINY_ID}"')
        kept = config.read_text()
        picker = await open_picker(app, pilot)
        assert lines(picker)[-1].startswith(f"● {TINY_ID} · ")  # the one running
        await pilot.press("escape")
        await pick_typed(app, pilot, str(tiny_model_dir))  # enter: switched, the config as it was
        await wait_for(pilot, lambda: app.session.model_name == tiny_model_dir.name, "the switch back")
        assert config.read_text() == kept

    run(ChatApp(load_settings(config)), scenario)

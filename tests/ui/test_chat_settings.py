"""A chat's own system prompt and sampling: the form's defaults, its checks, and the next turn using them."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input, Static, Switch, TextArea

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.chat_settings import ChatSettingsScreen
from mlxchat.app.chats.store import ChatStore
from mlxchat.engine.events import SamplingParams
from tests.pilot import HeldWhen, make_app, notes, ready, rendered_prompt, run, send, wait_for



def test_settings_default_to_the_config_and_apply_from_the_next_turn(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        form = app.screen
        values = {name: form.query_one(f"#{name}", Input).value
                  for name in ("temperature", "top_p", "top_k", "max_tokens", "seed")}
        assert values == {"temperature": "0.0", "top_p": "0.95", "top_k": "40", "max_tokens": "64", "seed": ""}
        assert form.query_one(TextArea).text == "Be brief."

        form.query_one("#top_p", Input).value = "2"
        form.query_one("#max_tokens", Input).value = "many"
        await pilot.press("ctrl+s")
        error = str(form.query_one("#form-error", Static).render())
        assert "top_p: Input should be less than or equal to 1" in error and "max_tokens:" in error
        assert app.screen is form  # nothing applied

        form.query_one("#top_p", Input).value = "0.9"
        form.query_one("#max_tokens", Input).value = "5"
        form.query_one("#seed", Input).value = "7"
        assert not form.query_one("#speculative", Switch).value  # (the config's "off")
        form.query_one("#speculative", Switch).value = True
        form.query_one(TextArea).text = "You are a pirate."
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
        assert pane.chat.system_prompt == "You are a pirate."
        assert pane.chat.sampling == SamplingParams(temperature=0.0, top_p=0.9, top_k=40, max_tokens=5, seed=7,
                                                    speculative="lookup")

        # What the engine was asked for, held while the reply runs: the sampling, and the system prompt rendered.
        hold = HeldWhen(app, lambda core: core.slots[0].request is not None)
        await send(pilot, pane, "Hello there")
        await hold.held()
        assert app.session.snapshot().slots[0].sampling == pane.chat.sampling
        prompt = rendered_prompt(app, 0)  # (read while the engine thread is held)
        assert "You are a pirate." in prompt and "Be brief." not in prompt and "Hello there" in prompt
        hold.release()
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        assert pane.last_stats is not None and pane.last_stats.generated_tokens == 5
        assert notes(pane) == ["(the reply reached max_tokens = 5)"]
        saved = ChatStore.open_existing().load(pane.chat.id)  # type: ignore[arg-type]
        assert saved is not None and saved.system_prompt == "You are a pirate." and saved.sampling.seed == 7
        assert saved.sampling.speculative == "lookup"

        # Escape leaves everything as it was.
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        app.screen.query_one("#max_tokens", Input).value = "99"
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
        assert pane.chat.sampling.max_tokens == 5

    run(make_app(tiny_model_dir, system_prompt="Be brief."), scenario)


def test_f5_turns_a_chat_s_draft_model_speculation_off_and_on_again(tiny_model_dir: Path, tmp_path: Path) -> None:
    """speculative = "draft" comes from the config (it needs its draft_model); F5's switch turns it off for a chat,
    and on again as "draft", not "lookup"."""
    from tests.tiny_draft import build_draft

    draft = build_draft(tiny_model_dir, tmp_path / "draft")

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        for on in (False, True):
            await pilot.press("f5")
            await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
            switch = app.screen.query_one("#speculative", Switch)
            assert switch.value is not on
            switch.value = on
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
            assert pane.chat.sampling.speculative == ("draft" if on else "off")

    run(make_app(tiny_model_dir, draft_model=str(draft), sampling={"speculative": "draft"}), scenario)

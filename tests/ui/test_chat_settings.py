"""A chat's own system prompt and sampling: the form's defaults, its checks, and the next turn using them."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input, RadioButton, RadioSet, Static, TextArea

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.chat_settings import ChatSettingsScreen
from mlxchat.app.chats.store import ChatStore
from mlxchat.engine.events import SamplingParams
from tests.pilot import HeldWhen, make_app, notes, ready, rendered_prompt, run, send, wait_for


async def choose(pilot: Pilot, way: str) -> list[str]:
    """Picks `way` in F5's speculative choice by keys, as a user does: focus, right until it is selected, space.
    Returns the ways that a round of right presses (one per way) selected first: a greyed one is passed by."""
    choice = pilot.app.screen.query_one("#speculative", RadioSet)
    buttons = list(choice.query(RadioButton))
    choice.focus()

    def selected() -> str:
        return next((str(b.name) for b in buttons if b.has_class("-selected")), "")

    walked = []
    for _ in buttons:
        await pilot.press("right")
        walked.append(selected())
    for _ in buttons:
        if selected() == way:
            break
        await pilot.press("right")
    await pilot.press("space")
    assert choice.pressed_button is not None and choice.pressed_button.name == way, f"{way} not reached: {walked}"
    return walked


def ways(form: ChatSettingsScreen) -> dict[str, str]:
    """F5's ways of speculating as shown (their labels): "pressed", "disabled" (greyed, passed by), or neither."""
    return {str(b.label): " ".join(filter(None, ["pressed" * b.value, "disabled" * b.disabled]))
            for b in form.query_one("#speculative", RadioSet).query(RadioButton)}


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
        # The config's "off"; "draft" is greyed, with why, and the keys pass it by: no draft model is loaded.
        assert ways(form) == {"off": "pressed", "lookup": "", "draft (no draft_model)": "disabled"}
        assert await choose(pilot, "lookup") == ["lookup", "off", "lookup"]
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


def test_f5_offers_the_draft_model_s_way_only_where_one_is_loaded(tiny_model_dir: Path, tmp_path: Path) -> None:
    """With a draft model loaded, F5's choice offers "draft" too: a chat set to it (here by the config) turns
    speculation off, then picks "draft" again, by keys."""
    from tests.tiny_draft import build_draft

    draft = build_draft(tiny_model_dir, tmp_path / "draft")

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        for way, shown in (("off", "draft"), ("draft", "off")):
            await pilot.press("f5")
            await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
            assert ways(app.screen) == {w: "pressed" * (w == shown) for w in ("off", "lookup", "draft")}
            assert await choose(pilot, way) == ["lookup", "draft", "off"]
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
            assert pane.chat.sampling.speculative == way

    run(make_app(tiny_model_dir, draft_model=str(draft), sampling={"speculative": "draft"}), scenario)

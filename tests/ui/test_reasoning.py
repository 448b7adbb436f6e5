"""Reasoning in the app, on the tiny scripted reasoning model (tests/tiny_reasoning.py): its block streams open,
folds when the answer starts, opens again with its key or a click, and the chat keeps that; thinking off and the
budget in F5; the next turn's prompt; copy, find, saving and reopening."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input, Switch

from mlxchat.app.chats.store import ChatStore
from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.chat_settings import ChatSettingsScreen
from mlxchat.app.ui.screens.find import FindScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.app.ui.widgets.reasoning_block import THINKING, ReasoningBlock
from mlxchat.app.ui.widgets.reply_view import ReplyView
from tests.pilot import HeldWhen, from_terminal, make_app, ready, rendered_prompt, run, send, submit, wait_for
from tests.tiny_reasoning import ANSWER, REASONING


def blocks(pane: ChatPane) -> list[ReasoningBlock]:
    return list(pane.query(ReasoningBlock).results(ReasoningBlock))


def answers(pane: ChatPane) -> list[str]:
    return [view.text for view in pane.query(ReplyView).results(ReplyView)]



def reasoning_so_far(tokens: int):
    """A HeldWhen condition: slot 0's reply has reasoned `tokens` tokens and still reasons."""
    return lambda core: bool(core.slots[0].request and core.slots[0].request.split.reasoning
                             and core.slots[0].request.split.reasoning_tokens >= tokens)


def test_the_block_streams_open_folds_when_the_answer_starts_and_opens_again(reasoning_model) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        hold = HeldWhen(app, reasoning_so_far(3))
        await submit(pilot, pane, "Where is Paris?")
        await hold.held()
        # Held mid-reasoning: the block is open, says it is thinking and shows the reasoning so far.
        await wait_for(pilot, lambda: bool(blocks(pane)) and bool(blocks(pane)[0].text), "the reasoning block")
        block = blocks(pane)[0]
        assert not block.collapsed and block.title == THINKING
        assert REASONING.startswith(block.text) and block.text
        assert app.session.snapshot().slots[0].reasoning_tokens is not None  # the inspector's "thinking"
        hold.release()
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        # Ended: folded to its header, the answer below it, the reasoning apart from it.
        assert block.collapsed and block.title.startswith("Thought for ") and block.title.endswith(" · 7 tokens")
        assert block.text == REASONING and answers(pane) == [ANSWER]
        reply = pane.chat.messages[-1]
        assert (reply.text, reply.reasoning, reply.reasoning_tokens) == (ANSWER, REASONING, 7)

        # Its key opens it and the chat keeps the choice (saved); a click on its header folds it again.
        await from_terminal(app, pilot, "\x1br")  # alt+r, as a terminal sends it
        assert not block.collapsed and pane.chat.reasoning_open
        assert ChatStore.open_existing().load(pane.chat.id).reasoning_open  # type: ignore[arg-type, union-attr]
        await pilot.click(block.query_one("CollapsibleTitle"))
        await pilot.pause()
        assert block.collapsed and not pane.chat.reasoning_open

        # Copy takes the answer only; find finds the reasoning, opening its block.
        await from_terminal(app, pilot, "\x1bc")  # alt+c
        assert app.clipboard == ANSWER
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, FindScreen), "the find bar")
        app.screen.query_one(Input).value = "share one"
        await wait_for(pilot, lambda: app.screen.current is not None, "a match")  # type: ignore[attr-defined]
        assert not block.collapsed

    run(make_app(reasoning_model("switch")), scenario)


def test_thinking_off_and_a_budget_in_f5_and_the_next_prompt_holds_answers_only(reasoning_model) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Where is Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the first reply")

        # The next turn's prompt: the first reply's answer, not its reasoning.
        hold = HeldWhen(app, lambda core: core.slots[0].request is not None)
        await submit(pilot, pane, "And Rome?")
        await hold.held()
        prompt = rendered_prompt(app)
        assert ANSWER in prompt and REASONING not in prompt
        # The slot kept the first turn's prompt: only what follows it is read again.
        assert app.session.snapshot().slots[0].cached_tokens > 0
        hold.release()
        await wait_for(pilot, lambda: not pane.busy, "the second reply")

        # F5: the model has the switch; thinking off, then a budget of 2 with thinking on.
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        app.screen.query_one("#thinking", Switch).value = False
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
        assert pane.chat.sampling.thinking is False
        await send(pilot, pane, "And Berlin?")
        await wait_for(pilot, lambda: not pane.busy, "the reply without thinking")
        assert len(blocks(pane)) == 2 and pane.chat.messages[-1].reasoning == ""
        assert answers(pane)[-1].strip() == ANSWER.strip()

        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        app.screen.query_one("#thinking", Switch).value = True
        app.screen.query_one("#reasoning_budget", Input).value = "2"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChatSettingsScreen), "the form to close")
        await send(pilot, pane, "And Madrid?")
        await wait_for(pilot, lambda: not pane.busy, "the reply with a budget")
        last = pane.chat.messages[-1]
        assert (last.reasoning, last.reasoning_tokens, last.text) == ("Several chats", 2, ANSWER)
        assert blocks(pane)[-1].title.endswith(" · 2 tokens")
        saved = ChatStore.open_existing().load(pane.chat.id)  # type: ignore[arg-type]
        assert saved is not None and (saved.sampling.thinking, saved.sampling.reasoning_budget) == (True, 2)

    run(make_app(reasoning_model("switch")), scenario)


def test_a_model_without_the_switch_shows_none_and_kept_reasoning_is_sent_back(reasoning_model) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatSettingsScreen), "the settings form")
        assert not app.screen.query("#thinking")  # the template opens its reasoning itself: nothing to turn off
        await pilot.press("escape")
        await send(pilot, pane, "Where is Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the first reply")
        assert pane.chat.messages[-1].reasoning == REASONING  # the reply started in its reasoning
        hold = HeldWhen(app, lambda core: core.slots[0].request is not None)
        await submit(pilot, pane, "And Rome?")
        await hold.held()
        assert REASONING in rendered_prompt(app)  # keep_reasoning = true
        hold.release()
        await wait_for(pilot, lambda: not pane.busy, "the second reply")

    run(make_app(reasoning_model("opens"), keep_reasoning=True), scenario)


def test_a_reopened_chat_shows_its_reasoning_folded_and_kept_open_where_it_was(reasoning_model, tmp_path: Path) -> None:
    async def first_run(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Where is Paris?")
        await wait_for(pilot, lambda: not pane.busy, "the reply")

    async def second_run(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await wait_for(pilot, lambda: bool(blocks(pane)), "the reopened chat")
        block = blocks(pane)[0]
        assert block.collapsed and block.text == REASONING and block.title.endswith(" · 7 tokens")
        await from_terminal(app, pilot, "\x1br")
        assert not block.collapsed

    async def third_run(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await wait_for(pilot, lambda: bool(blocks(pane)), "the reopened chat")
        assert not blocks(pane)[0].collapsed

    model = reasoning_model("channel")
    for scenario in (first_run, second_run, third_run):
        run(make_app(model), scenario)

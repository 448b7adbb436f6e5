"""Parked chats in the real app on the tiny model: with one slot, two chats take turns; each comes back to
its parked KV and prefills only its new message; with parking off, the pane says why it was slow."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.engine.events import RequestStats
from tests.pilot import make_app, notes, run, send, wait_for
from tests.ui.test_queue import open_chats

OPENINGS = {
    "first": "Paris is the capital of France. Tell me about its museums, its river and its food, please.",
    "second": "Lyon sits where two rivers meet. Tell me about its old town, its silk and its food, please.",
}


async def turn(pilot: Pilot, pane: ChatPane, text: str) -> RequestStats:
    """Sends `text` from the pane, waits for the whole reply, returns its stats."""
    pane.focus_input()
    await send(pilot, pane, text)
    await wait_for(pilot, lambda: not pane.busy and pane.last_stats is not None, "the reply")
    assert pane.last_stats is not None
    return pane.last_stats


def alternate(tiny_model_dir: Path, parallel: int) -> dict[str, list[tuple[RequestStats, str]]]:
    """Two chats take two turns each, one after the other, on `parallel` slots: each turn's stats and reply."""
    seen: dict[str, list[tuple[RequestStats, str]]] = {"first": [], "second": []}

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_chats(app, pilot, 2)
        for again in (False, True):
            for name, pane in (("first", first), ("second", second)):
                stats = await turn(pilot, pane, "Tell me more." if again else OPENINGS[name])
                seen[name].append((stats, pane.chat.messages[-1].text))
        if parallel == 1:  # the first chat is parked as the second takes the slot for its last turn
            parked = app.session.snapshot().parked
            assert [p.label for p in parked] == [first.chat_title] and parked[0].tokens > 0

    # The disk tier off: this is about the parked store (with it, the second run would find the first's KV).
    run(make_app(tiny_model_dir, parallel=parallel, ctx_size=2048, disk_kv_mb=0, sampling={"max_tokens": 24}),
        scenario)
    return seen


def test_two_chats_on_one_slot_take_turns_and_prefill_only_their_new_message(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On one slot each chat's second turn gets its KV back from the parked store: it prefills exactly
    what it prefills when each chat keeps a slot of its own, and says the same."""
    lent = alternate(tiny_model_dir, parallel=1)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-own"))  # two fresh chats again, not the saved ones
    own = alternate(tiny_model_dir, parallel=2)
    for name in lent:
        (one, _), (two, text) = lent[name]
        (own_one, _), (own_two, own_text) = own[name]
        assert (one.restored_from, one.lost, one.cached_tokens) == (None, None, 0), name
        assert (two.restored_from, two.lost) == ("parked", None), name
        assert own_two.restored_from is None and own_two.cached_tokens >= own_one.prompt_tokens, name
        assert (two.cached_tokens, two.prefilled_tokens) == (own_two.cached_tokens, own_two.prefilled_tokens), name
        assert two.prefilled_tokens < two.prompt_tokens // 2, name
        assert text == own_text, name


def test_with_parking_off_a_returning_chat_says_why_its_first_token_was_slow(tiny_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_chats(app, pilot, 2)
        await turn(pilot, first, OPENINGS["first"])
        await turn(pilot, second, "Hello there")
        assert app.session.snapshot().parked == ()
        stats = await turn(pilot, first, "Tell me more.")
        assert stats.cached_tokens == 0 and stats.prefilled_tokens == stats.prompt_tokens
        said = [n for n in notes(first) if "prefilled again" in n]
        assert len(said) == 1 and "parking is off (park_budget_mb = 0)" in said[0]
        assert f"prefilled again, {stats.prompt_tokens} tokens, because" in said[0]

    run(make_app(tiny_model_dir, parallel=1, ctx_size=1024, park_budget_mb=0, disk_kv_mb=0,
                 sampling={"max_tokens": 24}), scenario)

"""Chats beyond the slots, in the real app on the tiny model: slots are lent, and with every slot
generating a message waits in the session's queue, showing its place, until a slot frees."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Static, TabbedContent

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from tests.pilot import hold_engine, make_app, notes, ready, run, submit, wait_for

LONG = ("Tell me a long story about a lighthouse keeper who collects the messages that wash up on the "
        "shore, the people who wrote them, and what happens when one of them is addressed to him.")
REPLY_TOKENS = 120


def queue_note(pane: ChatPane) -> str:
    """The note that tells a waiting message's place in line ("" when the pane shows none)."""
    return "".join(str(note.render()) for note in pane.query(".queue-note").results(Static))


def tab_label(app: ChatApp, pane: ChatPane) -> str:
    """The text of the pane's tab."""
    return str(app.query_one("#chats", TabbedContent).get_tab(pane.id or "").label)


async def open_chats(app: ChatApp, pilot: Pilot, n: int) -> list[ChatPane]:
    """Waits for the first chat and opens more, up to `n` (ctrl+n never refuses)."""
    await ready(app, pilot)
    for _ in range(n - 1):
        await pilot.press("ctrl+n")
    await wait_for(pilot, lambda: len(app.chat_panes) == n, f"{n} chats")
    return app.chat_panes


def test_six_chats_on_two_slots_all_get_full_replies_two_at_a_time(tiny_model_dir: Path) -> None:
    seen = {"generating": 0, "slots_busy": 0}
    places: dict[str, set[str]] = {}

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        panes = await open_chats(app, pilot, 6)
        assert [p.slot_id for p in panes] == [0, 1, None, None, None, None]

        def record() -> None:
            for pane in panes:
                if pane.queued and queue_note(pane):
                    places.setdefault(pane.chat_id, set()).add(pane.status_text)

        # Held while the six are sent: the first replies cannot end before the last chat is in line.
        release = hold_engine(app)
        for pane in panes:
            await submit(pilot, pane, LONG)
        await wait_for(pilot, lambda: record() or "4th in line" in queue_note(panes[5]), "the last chat's place")
        release()

        def all_done() -> bool:
            # (a pane stays busy until the end of its reply is shown: the session counts who generates)
            seen["generating"] = max(seen["generating"], len(app.session.busy_titles()))
            slots = app.session.snapshot().slots
            seen["slots_busy"] = max(seen["slots_busy"], sum(s.state != "idle" for s in slots))
            record()
            return not any(p.busy for p in panes)

        await wait_for(pilot, all_done, "six replies")
        for pane in panes:
            user, reply = pane.chat.messages
            assert (user.role, user.text, reply.role) == ("user", LONG, "assistant")
            assert (reply.finish_reason, reply.generated_tokens) == ("length", REPLY_TOKENS), pane.chat_title
            assert not [n for n in notes(pane) if n.startswith(("Not sent", "Error"))]
            assert not queue_note(pane)
        assert seen["generating"] == 2 and seen["slots_busy"] == 2
        # The four beyond the slots waited in line and were told their place as it changed.
        assert len(places) == 4
        shown = set().union(*places.values())
        assert {f"queued · {o} in line for a slot · escape takes it back" for o in ("next", "2nd", "3rd", "4th")} <= shown

    app = make_app(tiny_model_dir, parallel=2, ctx_size=2048, sampling={"max_tokens": REPLY_TOKENS})
    app.sampling = dataclasses.replace(app.sampling, ignore_eos=True)  # full replies: max_tokens each
    run(app, scenario)


def test_escape_takes_a_queued_message_back_and_a_finished_chat_out_of_view_is_told(long_model_dir: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first, second = await open_chats(app, pilot, 2)
        second.chat.sampling = dataclasses.replace(second.chat.sampling, max_tokens=16)
        await submit(pilot, first, "Tell me about the terminal app")
        await submit(pilot, second, "Are you there?")
        await wait_for(pilot, lambda: "next in line" in queue_note(second), "the queue note")
        await wait_for(pilot, lambda: tab_label(app, second).startswith("◷ "), "the queued badge")
        # Escape in the waiting chat: its message leaves the line and goes back to the input.
        await pilot.press("escape")
        await wait_for(pilot, lambda: not second.busy, "the message to come out of the queue")
        assert second.chat_input.text == "Are you there?" and second.chat.messages == []
        assert not second.query(".user-turn") and not queue_note(second) and not notes(second)
        assert first.busy  # the other reply goes on
        # Sent again, it waits again; stopping the first reply lets it start at once.
        await submit(pilot, second, "Are you there?")
        await wait_for(pilot, lambda: second.queued, "the queue")
        first.stop_reply()
        await wait_for(pilot, lambda: not second.busy and not first.busy, "both replies")
        assert [m.role for m in second.chat.messages] == ["user", "assistant"]
        assert second.slot_id == 0 and first.slot_id is None  # the slot was lent to the waiting chat
        # The first chat, out of view, finished before the second: ctrl+l goes to the last one.
        first.chat.sampling = second.chat.sampling
        await pilot.press("alt+1")
        await submit(pilot, first, "Again")
        await pilot.press("alt+2")
        await wait_for(pilot, lambda: not first.busy, "the reply out of view")
        await wait_for(pilot, lambda: tab_label(app, first).startswith("✓ "), "the finished badge")
        assert any("has finished its reply (ctrl+l shows it)" in str(n.message) for n in app._notifications)
        await pilot.press("ctrl+l")
        assert app.active_chat is first
        await wait_for(pilot, lambda: not tab_label(app, first).startswith("✓ "), "the badge to go")

    # One slot, and a reply long enough to be stopped: it runs to the end of the slot unless it is.
    app = make_app(long_model_dir, parallel=1, ctx_size=65536, sampling={"max_tokens": 65536})
    app.sampling = dataclasses.replace(app.sampling, ignore_eos=True)
    run(app, scenario)


def test_a_chat_waiting_in_line_shows_its_place(ascii_model_dir: Path) -> None:
    """One slot, answering chat 1 (held between two steps, so nothing moves); chats 2 and 3 wait in line,
    each told its place in its pane, its status line and its tab.

    (Not a screenshot: where the conversation scrolls depends on when the reply's room was reserved.)
    """
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        panes = await open_chats(app, pilot, 3)
        hold_engine(app)
        for pane, text in zip(panes, ("What is a terminal?", "And a shell?", "Which one came first?")):
            await submit(pilot, pane, text)
        await wait_for(pilot, lambda: "2nd in line" in queue_note(panes[2]), "the third chat's place")
        await wait_for(pilot, lambda: "queued" in panes[2].status_text, "the status line")
        await wait_for(pilot, lambda: tab_label(app, panes[0]).startswith("● "), "the badges")
        assert "next in line" in queue_note(panes[1]) and "queued" in panes[1].status_text
        assert [tab_label(app, p)[:2] for p in panes] == ["● ", "◷ ", "◷ "]

    run(make_app(ascii_model_dir, parallel=1, ctx_size=2048), scenario)

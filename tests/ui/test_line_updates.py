"""Screen updates drawn by app.ui.workarounds.line_updates equal Textual's own, byte for byte, on the app as it runs: chats in
the grid streaming, keys typed, a chat scrolled."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from textual._compositor import Compositor
from textual.pilot import Pilot

from mlxchat.app.ui.workarounds import line_updates
from mlxchat.app.ui.app import ChatApp
from tests.pilot import make_app, ready, run, submit, wait_for


def test_each_update_is_textuals_own(endless_model_dir: Path, monkeypatch) -> None:
    console = Console(width=300, height=100, force_terminal=True, color_system="truecolor")
    compared: list[bool] = []

    def both(compositor: Compositor):
        changed = compositor._dirty_regions.copy()
        textuals = line_updates.TEXTUAL_OWN(compositor)
        compositor._dirty_regions.update(changed)
        ours = line_updates.render_changed_lines(compositor)
        assert (textuals is None) == (ours is None)
        if ours is not None:
            same = ours.render_segments(console) == textuals.render_segments(console)
            if not same:  # (the engine's thread may have changed what a widget shows between the two: once more)
                compositor._dirty_regions.update(changed)
                same = ours.render_segments(console) == line_updates.TEXTUAL_OWN(compositor).render_segments(console)
            compared.append(same)
        return ours

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        assert Compositor.render_partial_update is line_updates.render_changed_lines  # (installed by the app)
        monkeypatch.setattr(Compositor, "render_partial_update", both)
        first = await ready(app, pilot)
        for _ in range(2):
            await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 3, "three chats")
        await pilot.press("f4")
        for number, pane in enumerate(app.chat_panes):
            await submit(pilot, pane, f"Tell me about the terminal app, part {number}")
        await wait_for(pilot, lambda: len(first.reply_text) > 40 or not first.busy, "the first reply's words")
        first.focus_input()
        await pilot.press(*"typed while they stream")
        await wait_for(pilot, lambda: not any(p.busy for p in app.chat_panes), "the replies")
        first.view.scroll_home(animate=False)
        await pilot.pause()

    run(make_app(endless_model_dir, sampling={"max_tokens": 96}), scenario)
    assert len(compared) > 20 and all(compared), f"{compared.count(False)} of {len(compared)} updates differ"

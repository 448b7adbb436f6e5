"""The key bar at the bottom of every screen: whole keys only, as many as it has room for."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from mlxchat.app.ui.app import ChatApp
from tests.pilot import make_app, ready, run, screen_lines, wait_for


def keys_as_footer_shows_them(app: ChatApp) -> list[str]:
    """Each key the screen's bindings put in the footer, as it reads there ('f1 Help'), in order (one per action,
    as Textual's Footer shows them), the palette's key left out."""
    shown: dict[str, str] = {}
    for _, binding, _, _ in app.screen.active_bindings.values():
        if binding.show and binding.action not in shown and binding.key != app.COMMAND_PALETTE_BINDING:
            shown[binding.action] = f"{app.get_key_display(binding)} {binding.description}"
    return list(shown.values())


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_the_footer_shows_whole_keys_only(tiny_model_dir: Path, size: tuple[int, int]) -> None:
    # At 80 columns the chats' keys ran under the palette's key at the right edge, cut mid-word ('f4 Grid  ^▏^p').
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pilot.pause()
        await wait_for(pilot, lambda: screen_lines(app)[-1].endswith("^p palette"), "the footer")
        keys = keys_as_footer_shows_them(app)
        bar = screen_lines(app)[-1].removesuffix("▏^p palette").strip()
        whole = [" ".join(keys[:n]) for n in range(1, len(keys) + 1)]
        assert bar in whole, bar  # the first keys, each whole, and nothing of the next
        hidden = [key for key in app.screen.query(FooterKey) if not key.display]
        if size[0] >= 120:
            assert bar == whole[-1] and not hidden  # room for every key: none left out
        else:
            assert hidden and bar != whole[-1]

    app = make_app(tiny_model_dir)
    run(app, scenario, size)

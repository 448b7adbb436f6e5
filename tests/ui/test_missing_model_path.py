"""alt+m with a path where nothing is: the picker says so, naming it, and switches to nothing (a relative path of
several parts is not taken for a Hub id to download)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from mlxchat.app.ui.app import ChatApp
from mlxchat.app.ui.screens.model_picker import ModelPickerScreen
from tests.pilot import make_app, ready, run
from tests.ui.test_model_switch import lines, pick_typed, toasts


@pytest.mark.parametrize("typed", ["{tmp}/no-such-model", "{tmp}/nothing.gguf", "models/qwen/none", "~/no-such-mlx"])
def test_a_path_where_nothing_is_is_named_as_missing(tiny_model_dir: Path, tmp_path: Path, typed: str) -> None:
    typed = typed.format(tmp=tmp_path)

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        await pick_typed(app, pilot, typed)
        await pilot.pause()
        picker = app.screen
        assert isinstance(picker, ModelPickerScreen)  # (still open: nothing to switch to)
        assert lines(picker) == [f"{typed}: no such file or folder"]
        assert f"{typed}: no such file or folder." in toasts(app)

    run(make_app(tiny_model_dir), scenario)

"""Saved KV as the app handles it: quitting writes every chat's KV (and waits for it), and a damaged file met at
the next launch is removed, with a note that the app shows."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from mlxchat.app import paths
from mlxchat.app.ui.app import ChatApp
from tests.pilot import make_app, press_to_end, ready, run, send, wait_for


def saved_files() -> list[Path]:
    return sorted(paths.kv_cache_dir().glob("*/*.safetensors"))


def test_quitting_writes_the_kv_and_a_damaged_file_is_said_at_the_next_launch(tiny_model_dir: Path) -> None:
    async def chat(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await send(pilot, pane, "Hello, how are you today?")
        await wait_for(pilot, lambda: not pane.busy, "the reply")
        assert saved_files() == []  # nothing is written while the chat sits on its slot
        await press_to_end(app, "ctrl+q")

    run(make_app(tiny_model_dir), chat)
    # The app has ended: its engine wrote the slot's KV before it let the app go.
    (saved,) = saved_files()
    saved.write_bytes(saved.read_bytes()[:-100])  # truncated: a crash in the middle of a write

    async def relaunch(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        said = lambda: [str(n.message) for n in app._notifications if str(n.message).startswith("Saved KV: ")]
        await wait_for(pilot, lambda: bool(said()), "the note on the damaged file")
        assert "ignored and removed" in said()[0] and "truncated" in said()[0]
        assert saved_files() == []

    run(make_app(tiny_model_dir), relaunch)

"""Images in a chat through Pilot, on a tiny random-weight Gemma 3 VLM (tests/tiny_vlms.py): `@shot.png` becomes a chip
with its pixels, size and tokens (the model's processor's count); the reply, written while another chat streams,
equals mlx-vlm's generate alone token for token; the image's tokens count in the slot; a second turn reuses the
image's K/V; the saved chat keeps a private copy of the image, and a text model refuses images naming alt+m."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from mlxchat.app.chats.export import to_markdown
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.ui.app import ChatApp
from tests.markers import needs_cpu
from tests.pilot import make_app, ready, run, send, steady_cursors, submit, wait_for
from tests.tiny_vlms import build_tiny_vlm, mlx_vlm_alone, tiny_image
from tests.ui.test_attachments import attach, chips, toasts
from tests.ui.test_chat_snapshots import SIZE, converse
from tests.ui.test_inspector import open_inspector


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory) -> Path:
    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "gemma3", "gemma3")


@pytest.fixture
def shots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    tiny_image(folder / "shot.png", seed=0)
    monkeypatch.chdir(folder)
    return folder


def test_an_image_attached_by_at_is_answered_in_a_busy_slot_as_mlx_vlm_alone(gemma3: Path, shots: Path) -> None:
    shot = shots / "shot.png"
    size = shot.stat().st_size

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first = await ready(app, pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the second chat")
        second = app.chat_panes[1]
        await attach(pilot, second, "shot")
        line = f"@shot.png · 40×30 · {size / 1024:.1f} KiB · 4 tokens"
        assert chips(second) == [f"{line} ✕"]
        await submit(pilot, first, "Tell me a long story about Paris.")  # (streams while the picture is read)
        await send(pilot, second, "What is this?")
        await wait_for(pilot, lambda: not first.busy and not second.busy, "both replies")
        core = app.session.engine.core  # type: ignore[union-attr]
        assert app.session.snapshot().widest_pass == 2  # the two chats shared decode passes
        stats = second.last_stats
        assert stats is not None
        wanted, prompt_tokens = mlx_vlm_alone(gemma3, [{"role": "user", "content": [
            {"type": "image", "path": str(shot)}, {"type": "text", "text": "What is this?"}]}], n=64)
        slot = app.session.slot_of(second.chat_id)
        history = core.slots[slot].history
        n = stats.generated_tokens - 1  # (the last token is in no pass yet)
        assert history[len(history) - n:] == wanted[:n] and n > 8
        assert stats.prompt_tokens == prompt_tokens  # the image's tokens, in the slot's count
        assert str(second.view.user_turn(0).render()) == f"What is this?\n{line}"  # the fallback line

        runs = core.model.vision_parts.runs
        await send(pilot, second, "And then?")
        await wait_for(pilot, lambda: not second.busy, "the second turn")
        assert core.model.vision_parts.runs == runs  # the image's K/V was reused, the tower did not run again
        assert second.last_stats.cached_tokens >= prompt_tokens

        saved = ChatStore.open_for_app(None)[0].load(second.chat.id)
        [record] = saved.messages[0].attachments
        copy = Path(record["path"])
        assert copy.name == hashlib.sha256(shot.read_bytes()).hexdigest() + ".png"
        assert copy.stat().st_mode & 0o777 == 0o600 and (record["width"], record["height"]) == (40, 30)
        assert f"![shot.png]({copy.as_uri()})" in to_markdown(saved)

    run(make_app(gemma3), scenario)


@pytest.mark.parametrize("family", ["gemma3", "qwen3_5"])
def test_the_inspector_says_whether_the_model_sees_and_which_families_do(family: str, tmp_path: Path) -> None:
    """F3 on a vision model: it sees (Gemma 3), or why not (Qwen 3.5, refused with images: it chats as text)."""
    folder = build_tiny_vlm(tmp_path / family, family)
    said = {"gemma3": "Images this model sees (gemma3, through mlx-vlm)",
            "qwen3_5": "Images model type 'qwen3_5' is not supported by mlxchat's engine with images: its recurrent"}

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        await ready(app, pilot)
        screen = await open_inspector(app, pilot)
        console = Console(width=120, record=True)
        console.print(screen.query_one("#inspector-figures", Static).content)
        figures = " ".join(console.export_text().split())
        assert said[family] in figures
        assert "the families that see: gemma3, qwen2_vl, qwen2_5_vl, qwen3_vl" in figures.replace("The", "the")

    run(make_app(folder), scenario)


def test_a_text_model_refuses_an_image_naming_alt_m(tiny_model_dir: Path, shots: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        assert pane.attacher.attachments == []
        assert any("shot.png is an image, and this model does not take images: alt+m" in t for t in toasts(app))

    run(make_app(tiny_model_dir), scenario)


@needs_cpu  # (the accepted screen holds a random-weight reply as the CPU computes it)
def test_snapshot_of_a_chat_with_an_image(gemma3: Path, shots: Path, snap_compare: Any) -> None:
    """The image's line under the message it was sent with (name, pixels, size, tokens), where no picture is drawn."""
    app = make_app(gemma3, sampling={"max_tokens": 6})

    async def run_before(pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        await converse(app, pilot, pane, "What is this?")
        steady_cursors(app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

"""Images in a chat through Pilot, on tiny random-weight VLMs (tests/tiny_vlms.py: Gemma 3, Qwen2.5-VL, Qwen3-VL,
Mistral 3, SmolVLM): `@shot.png` becomes a chip with its pixels, size and tokens (the model's processor's count); the
reply, written while another chat streams, equals mlx-vlm's generate alone token for token, and so does the other
chat's; the image's tokens count in the slot; a second turn reuses the image's K/V; the saved chat keeps a private
copy of the image, and a text model refuses images naming alt+m; F3 says whether the model sees."""

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
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from tests.markers import needs_cpu
from tests.pilot import make_app, notes, ready, run, send, steady_cursors, submit, wait_for
from tests.tiny_vlms import build_tiny_vlm, mlx_vlm_alone, tiny_image, without_pad_token
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


# The 40x30 picture's tokens, worked out by hand: Gemma 3 reads any picture as its fixed 4. Qwen-VL scales it up
# to its least pixels keeping its shape, in whole merged patches: 56x84 (Qwen2.5-VL: min 56x56 in 28-pixel units) or
# 64x96 (Qwen3-VL: min 64x64 in 32-pixel units), each a 2x3 grid of tokens. Mistral 3 pads it to whole 14-pixel
# merged patches, 42x42: a 3x3 grid of [IMG] tokens (its rows' [IMG_BREAK]s and the [IMG_END] are not the image's).
# SmolVLM scales it to 56 pixels on its long side, 56x42, rounds each side up to whole 28-pixel tiles, 56x56, and
# reads its 2x2 tiles and the whole shrunk to one: 5 tiles of 4 tokens.
IMAGE_TOKENS = {"gemma3": 4, "mistral3": 9, "qwen2_5_vl": 6, "qwen3_vl": 6, "smolvlm": 20}


@pytest.mark.parametrize("family", sorted(IMAGE_TOKENS))
def test_an_image_attached_by_at_is_answered_in_a_busy_slot_as_mlx_vlm_alone(
        family: str, gemma3: Path, shots: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = gemma3 if family == "gemma3" else build_tiny_vlm(tmp_path_factory.mktemp("vlm") / family, family)
    shot = shots / "shot.png"
    size = shot.stat().st_size

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        first = await ready(app, pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: len(app.chat_panes) == 2, "the second chat")
        second = app.chat_panes[1]
        await attach(pilot, second, "shot")
        line = f"@shot.png · 40×30 · {size / 1024:.1f} KiB · {IMAGE_TOKENS[family]} tokens"
        assert chips(second) == [f"{line} ✕"]
        await submit(pilot, first, "Tell me a long story about Paris.")  # (streams while the picture is read)
        await send(pilot, second, "What is this?")
        await wait_for(pilot, lambda: not first.busy and not second.busy, "both replies")
        core = app.session.engine.core  # type: ignore[union-attr]
        assert app.session.snapshot().widest_pass == 2  # the two chats shared decode passes
        stats = second.last_stats
        assert stats is not None

        def alone_and_in_slot(pane: ChatPane, content: Any) -> int:
            """Checks the pane's reply against mlx-vlm's alone on its chat; returns the prompt's tokens there."""
            wanted, prompt_tokens = mlx_vlm_alone(folder, [{"role": "user", "content": content}], n=64)
            # The slot holds the prompt, then the reply's tokens that a pass has read: all but the last, or all
            # where the reply ended at the end-of-turn token, which is sampled and never read.
            reply = core.slots[app.session.slot_of(pane.chat_id)].history[prompt_tokens:]
            assert reply == wanted[:len(reply)] and len(reply) >= pane.last_stats.generated_tokens - 1
            return prompt_tokens

        # Both chats, the one beside it too (Qwen-VL: a slot's positions are its own).
        alone_and_in_slot(first, "Tell me a long story about Paris.")
        prompt_tokens = alone_and_in_slot(second, [{"type": "image", "path": str(shot)},
                                                   {"type": "text", "text": "What is this?"}])
        assert stats.generated_tokens > 8
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

    run(make_app(folder), scenario)


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
        seeing = ("the families that see: gemma3, gemma4, qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, mistral3, "
                  "pixtral, aya_vision, smolvlm, idefics3, internvl, kimi_vl, kimi_k25, glm4v, glm_ocr, paddleocr_vl, "
                  "llava_onevision, lfm2-vl")

        assert seeing in figures.replace("The", "the")

    run(make_app(folder), scenario)


def test_a_text_model_refuses_an_image_naming_alt_m(tiny_model_dir: Path, shots: Path) -> None:
    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        assert pane.attacher.attachments == []
        assert any("shot.png is an image, and this model does not take images: alt+m" in t for t in toasts(app))

    run(make_app(tiny_model_dir), scenario)


@needs_cpu  # (the accepted screen holds a random-weight reply as the CPU computes it)
@pytest.mark.parametrize("pictures", ["auto", "blocks"])
def test_snapshot_of_a_chat_with_an_image(pictures: str, gemma3: Path, shots: Path, snap_compare: Any) -> None:
    """The image's line under the message it was sent with (name, pixels, size, tokens), where no picture is drawn
    ("auto" in a terminal that draws no pictures: the fallback); "blocks" draws the picture under it in half blocks."""
    app = make_app(gemma3, pictures=pictures, sampling={"max_tokens": 6})

    async def run_before(pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        await converse(app, pilot, pane, "What is this?")
        steady_cursors(app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_a_message_asking_about_the_image_marker_itself_is_answered(shots: Path, tmp_path: Path) -> None:
    """Mistral 3 reads `[IMG]` as an image: typed in a message with a picture attached, it is read as text (the
    picture keeps its 9 tokens), and so in the next turns, beside the pad token that stands for it while the
    processor reads the prompt."""
    folder = build_tiny_vlm(tmp_path / "mistral3", "mistral3")

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        core = app.session.engine.core  # type: ignore[union-attr]

        def image_positions() -> int:
            return sum(1 for t in core.slots[app.session.slot_of(pane.chat_id)].history if t < 0)

        await attach(pilot, pane, "shot")
        for turn, text in enumerate(["What does [IMG] mean?", "And [IMG][IMG]?", "Is <pad> an [IMG]?"], 1):
            await send(pilot, pane, text)
            await wait_for(pilot, lambda: not pane.busy, "the reply")
            replies = [m for m in pane.chat.messages if m.role == "assistant"]
            assert len(pane.chat.messages) == 2 * turn and len(replies) == turn, text
            assert replies[-1].finish_reason == "length" and not any(n.startswith("Not sent") for n in notes(pane))
            assert image_positions() == IMAGE_TOKENS["mistral3"]

    run(make_app(folder), scenario)


def test_a_message_whose_image_marker_cannot_be_read_as_text_is_not_sent_and_stays(shots: Path,
                                                                                    tmp_path: Path) -> None:
    """A Gemma 3 with no pad token has no spare token to stand for a text's markers that its processor does not
    write too: the message is not sent, saying which marker and what to change, and stays in the box."""
    folder = without_pad_token(build_tiny_vlm(tmp_path / "gemma3", "gemma3"))

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        pane = await ready(app, pilot)
        await attach(pilot, pane, "shot")
        await send(pilot, pane, "What is <start_of_image>?")
        [said] = notes(pane)
        assert said.startswith("Not sent: this model reads '<start_of_image>' as an image") and "write it" in said
        assert pane.chat_input.text == "What is <start_of_image>?" and pane.chat.messages == []
        assert [a.name for a in pane.attacher.attachments] == ["shot.png"]

    run(make_app(folder), scenario)

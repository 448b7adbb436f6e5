"""Images sent to a server (engine = "remote"): as OpenAI `image_url` parts carrying the image's bytes, to a real
llama-server that takes them (a tiny image projector, tests/tiny_mmproj.py); refused, in words that name the model and
say what to change, by a server whose /props says it has no vision and by servers that refuse them when they come
(llama-server without its projector, mlx_lm.server). The reference replies are the servers' own, asked by hand over
HTTP, not through the engine."""

from __future__ import annotations

import base64
import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlxchat.engine.events import Done, SamplingParams
from mlxchat.engine.remote.engine import RemoteEngine
from mlxchat.engine.remote.server import make_client, probe
from mlxchat.engine.remote.state import remote_plan
from tests.servers import Server, serving_with_mlx_lm
from tests.tiny_mmproj import IMAGE_TOKENS
from tests.tiny_vlms import tiny_image

ASKED = "What is this?"
REPLY = 12  # tokens


def image_chat(path: Path) -> list[dict[str, Any]]:
    """One user message with an image, as the app's chats write it (app.files.attachments.with_files)."""
    return [{"role": "user", "content": [{"type": "image", "path": str(path)}, {"type": "text", "text": ASKED}]}]


def engine_on(url: str) -> RemoteEngine:
    client = make_client(url, None, 30)
    facts, _ = probe(client, url, None)
    client.close()
    return RemoteEngine(facts, remote_plan(facts, parallel=2), timeout=30)


@pytest.fixture
def engine(seeing_llama: Server) -> Iterator[RemoteEngine]:
    engine = engine_on(seeing_llama.url)
    yield engine
    engine.shutdown()


def ask(engine: RemoteEngine, messages: list[dict[str, Any]]) -> Done:
    return engine.submit(0, messages, sampling=SamplingParams(max_tokens=REPLY)).result(timeout=60)


def servers_own(url: str, content: Any) -> tuple[str, int]:
    """The server's greedy reply to one user message asked by hand (its text, its prompt's tokens)."""
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": REPLY, "temperature": 0}
    request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)
    return answer["choices"][0]["message"]["content"], answer["usage"]["prompt_tokens"]


def png_part(path: Path) -> dict[str, Any]:
    return {"type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()}}


def test_an_image_reaches_a_server_that_sees_as_its_bytes(engine: RemoteEngine, tmp_path: Path) -> None:
    assert engine.facts.sees is True  # its /props: "modalities": {"vision": true}
    assert engine.snapshot().images == "its model sees (its /props: vision)"
    shot, other = tiny_image(tmp_path / "shot.png", seed=0), tiny_image(tmp_path / "other.png", seed=1)
    done = ask(engine, image_chat(shot))
    assert done.error is None and done.text
    wanted, prompt = servers_own(engine.facts.base_url, [png_part(shot), {"type": "text", "text": ASKED}])
    assert done.text == wanted and done.stats.prompt_tokens == prompt
    # The prompt holds the image's tokens: (32 / 8) ** 2 patches of the projector's tower, besides the text's.
    _, text_only = servers_own(engine.facts.base_url, ASKED)
    assert prompt == text_only + IMAGE_TOKENS
    # Another picture, in the same place: another reply (its pixels reached the tower, not only its place).
    assert ask(engine, image_chat(other)).text != done.text


def test_a_webp_goes_as_a_png_of_its_pixels(engine: RemoteEngine, tmp_path: Path) -> None:
    """llama-server decodes no WebP: the engine sends its pixels as a PNG, and the reply is the PNG's."""
    from PIL import Image

    shot = tiny_image(tmp_path / "shot.png", seed=2)
    webp = tmp_path / "shot.webp"
    Image.open(shot).save(webp, lossless=True)
    done = ask(engine, image_chat(webp))
    assert done.error is None
    assert done.text == servers_own(engine.facts.base_url, [png_part(shot), {"type": "text", "text": ASKED}])[0]


def test_an_animated_gif_goes_as_its_first_frame(engine: RemoteEngine, tmp_path: Path) -> None:
    """What a local model sees of a GIF, its first frame, is what the server gets (four colours: GIF keeps them)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(5)
    colours = np.array([[0, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255]], dtype=np.uint8)
    first, second = (Image.fromarray(colours[rng.integers(0, 4, (30, 40))]) for _ in range(2))
    first.save(tmp_path / "first.png")
    second.save(tmp_path / "second.png")
    gif = tmp_path / "shot.gif"
    first.save(gif, save_all=True, append_images=[second])
    done = ask(engine, image_chat(gif))
    assert done.error is None
    own = {name: servers_own(engine.facts.base_url, [png_part(tmp_path / f"{name}.png"), {"type": "text",
                                                                                       "text": ASKED}])[0]
           for name in ("first", "second")}
    assert own["first"] != own["second"] and done.text == own["first"]


def test_an_image_the_server_cannot_decode_or_a_lost_copy_is_refused_as_such(engine: RemoteEngine,
                                                                             tmp_path: Path) -> None:
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    done = ask(engine, image_chat(broken))
    # The server's own words; not "does not take images": this server takes them, not this file.
    assert done.refused and done.error is not None and done.error.startswith("the server answered HTTP 400: ")
    assert "does not take images" not in done.error
    gone = ask(engine, image_chat(tmp_path / "gone.png"))
    assert gone.refused and gone.error is not None
    assert gone.error.startswith("the image gone.png cannot be read (No such file or directory): its copy in the "
                                 "data folder is gone")


def test_a_server_whose_props_say_no_vision_refuses_images_naming_its_model(blind_llama: Server,
                                                                            tmp_path: Path) -> None:
    engine = engine_on(blind_llama.url)
    try:
        assert engine.facts.sees is False
        shot = tiny_image(tmp_path / "shot.png")
        done = ask(engine, image_chat(shot))
        assert done.refused and done.error == (
            f"tiny-ascii.gguf on the llama-server at {blind_llama.url} does not take images (its /props says it has "
            "no vision): take the image off, or serve a model that sees (llama-server: its --mmproj)")
        assert ask(engine, [{"role": "user", "content": ASKED}]).error is None  # text it answers
        # A chat whose image is in an earlier message: its new message has none to take off.
        later = ask(engine, [*image_chat(shot), {"role": "assistant", "content": "A fox."},
                             {"role": "user", "content": "And then?"}])
        assert later.refused and later.error is not None and later.error.endswith(
            "(its /props says it has no vision): its earlier messages carry images: start a new chat, or fork this "
            "one before them, or serve a model that sees (llama-server: its --mmproj)")
        # Had it not said (as most servers do not), its refusal when the image comes says the same, with its words.
        unsaid = RemoteEngine(dataclasses.replace(engine.facts, sees=None), engine.plan, timeout=30)
        done = ask(unsaid, image_chat(shot))
        unsaid.shutdown()
        assert done.refused and done.error is not None and "regenerate" not in done.error  # (no retry would help)
        assert done.error.startswith(
            f"tiny-ascii.gguf on the llama-server at {blind_llama.url} does not take images (the server answered HTTP "
            "500: image input is not supported")
    finally:
        engine.shutdown()


def test_mlx_lm_server_refuses_images_when_they_come(ascii_model_dir: Path, tmp_path: Path) -> None:
    shot = tiny_image(tmp_path / "shot.png")
    with serving_with_mlx_lm(ascii_model_dir, tmp_path) as server:
        engine = engine_on(server.url)
        try:
            assert engine.facts.sees is None  # (no /props: it does not say)
            assert "does not say whether its model sees" in engine.snapshot().images
            done = ask(engine, image_chat(shot))
            assert done.refused and done.error == (
                f"tiny-ascii on the OpenAI-compatible server at {server.url} does not take images (the server "
                "answered HTTP 404: Only 'text' content type is supported.): take the image off, or serve a model "
                "that sees (llama-server: its --mmproj)")
        finally:
            engine.shutdown()


"""Vision-language models in the slots, token for token against mlx-vlm generating alone.

Tiny random-weight VLMs (tests/tiny_vlms.py) load through load_model as the app loads them; chats with images run
in busy slots with a small prefill chunk (chunks begin and end inside an image's tokens), greedy.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mlxchat.engine.events import SamplingParams
from mlxchat.engine.loading.vision import SEEING_FAMILIES
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.plan import SlotRequest, plan_slots
from tests.tiny_vlms import build_tiny_vlm, mlx_vlm_alone, tiny_image, without_pad_token
from tests.vision_outcomes import REFUSED_AT_LOAD, REFUSED_VARIANTS
from tests.vlm_specs import FAMILIES

NEW = 8
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True, temperature=0.0)
TEXTS = ["What is this?", "What is this?", "Paris is the capital of France. What is in the image?"]
# Three sizes: Qwen-VL reads each on its own grid, so each chat's positions after its image move by their own delta.
SIZES = [(56, 56), (112, 56), (112, 112)]
# Families whose language model has recurrent layers (LFM2's convolutions): their state cannot go back inside a reply.
RECURRENT = ("lfm2-vl",)


def chat(image: Path | None, text: str) -> list[dict]:
    parts = ([{"type": "image", "path": str(image)}] if image else []) + [{"type": "text", "text": text}]
    return [{"role": "user", "content": parts}]


def loaded_vlm(tmp_path_factory, family: str):
    from mlxchat.engine.loading.models import load_model

    folder = build_tiny_vlm(tmp_path_factory.mktemp("vlm") / family, family)
    images = [tiny_image(folder.parent / f"shot{i}.png", seed=i, size=SIZES[i]) for i in range(3)]
    return folder, images, load_model(str(folder))


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    return loaded_vlm(tmp_path_factory, "gemma3")


@pytest.fixture(scope="module", params=SEEING_FAMILIES)
def seeing(request, tmp_path_factory):
    """Each family that sees, loaded as the app loads it (Gemma 3's shared with the tests of it alone)."""
    if request.param == "gemma3":
        return request.getfixturevalue("gemma3")
    return loaded_vlm(tmp_path_factory, request.param)


def engine_for(loaded, parallel: int = 3) -> Engine:
    plan = plan_slots(SlotRequest(parallel, parallel * 256, parallel_max=8, per_slot_floor=64, per_slot_min=32),
                      None, 0, loaded.kv_footprint)
    return Engine(loaded.ready, plan, prefill_chunk=3)


def reply_tokens(engine: Engine, slot: int, done) -> list[int]:
    """The reply's tokens as the slot holds them (every one but the last, which no pass has read yet)."""
    history = engine.core.slots[slot].history
    return history[len(history) - (done.stats.generated_tokens - 1):]


def busy_slots_equal_alone(seeing) -> tuple[Engine, list[list[dict]], list]:
    """Three chats with images of three sizes at once (Qwen-VL: each slot rotates by its own prompt's mRoPE
    positions, in prefill chunks beside the others' and in the shared decode passes): each reply equals mlx-vlm's
    alone, and each prompt's count its processor's. Returns the engine (to shut down), the chats and their replies."""
    folder, images, loaded = seeing
    assert loaded.sees and loaded.vision_note is None
    chats = [chat(images[i], TEXTS[i]) for i in range(3)]
    wanted = [mlx_vlm_alone(folder, c) for c in chats]
    assert wanted[0][0] != wanted[1][0]  # the same words about two images: the picture decides the reply
    runs = loaded.model.vision_parts.runs
    engine = engine_for(loaded)
    try:
        dones = [h.result(60) for h in [engine.submit(i, c, sampling=GREEDY) for i, c in enumerate(chats)]]
        assert [d.error for d in dones] == [None] * 3
        for i, (tokens, prompt_tokens) in enumerate(wanted):
            assert reply_tokens(engine, i, dones[i]) == tokens[:-1], f"slot {i}"
            # The image's tokens count against the slot, as mlx-vlm's processor counts them.
            assert dones[i].stats.prompt_tokens == prompt_tokens
        assert loaded.model.vision_parts.runs == runs + 3
    except BaseException:
        engine.shutdown()
        raise
    return engine, chats, dones


def second_turn(chat_: list[dict], reply: str) -> list[dict]:
    return chat_ + [{"role": "assistant", "content": reply},
                    {"role": "user", "content": [{"type": "text", "text": "And then?"}]}]


@pytest.mark.parametrize("seeing", [f for f in SEEING_FAMILIES if f not in RECURRENT], indirect=True)
def test_images_in_busy_slots_equal_mlx_vlm_alone_and_a_second_turn_reuses_them(seeing):
    folder, _, loaded = seeing
    engine, chats, dones = busy_slots_equal_alone(seeing)
    try:
        # A second turn keeps the image: its K/V is reused (up to where the reply's text re-reads as other tokens).
        runs, second = loaded.model.vision_parts.runs, second_turn(chats[0], dones[0].text)
        done = engine.submit(0, second, sampling=GREEDY).result(60)
        assert done.error is None
        assert loaded.model.vision_parts.runs == runs
        assert done.stats.cached_tokens >= dones[0].stats.prompt_tokens
        assert reply_tokens(engine, 0, done) == mlx_vlm_alone(folder, second)[0][:-1]
    finally:
        engine.shutdown()


@pytest.mark.parametrize("seeing", RECURRENT, indirect=True)
def test_a_recurrent_vlm_in_busy_slots_equals_mlx_vlm_alone_and_a_second_turn_after_its_history_reuses_it(seeing):
    """A recurrent layer's state cannot go back inside a reply: a second turn reuses it where the slot's history is
    where the turn begins, here after a reply of one token (which no pass has read). A longer random-weight reply's
    text often re-reads as other tokens; the slot then starts over, image and all."""
    folder, _, loaded = seeing
    engine, chats, _ = busy_slots_equal_alone(seeing)
    try:
        first = engine.submit(0, chats[0], sampling=SamplingParams(max_tokens=1, temperature=0.0)).result(60)
        assert first.error is None
        runs, kept = loaded.model.vision_parts.runs, len(engine.core.slots[0].history)
        second = second_turn(chats[0], first.text)
        done = engine.submit(0, second, sampling=GREEDY).result(60)
        assert done.error is None
        assert loaded.model.vision_parts.runs == runs
        assert done.stats.cached_tokens == kept == first.stats.prompt_tokens
        assert reply_tokens(engine, 0, done) == mlx_vlm_alone(folder, second)[0][:-1]
    finally:
        engine.shutdown()


def test_another_image_of_the_same_size_is_read_again_not_reused(gemma3):
    """The image's positions in a slot's history are keyed by its bytes: the same words about another picture share
    the prefix up to the image only."""
    folder, images, loaded = gemma3
    engine = engine_for(loaded, parallel=1)
    try:
        first = engine.submit(0, chat(images[0], "What is this?"), sampling=GREEDY).result(60)
        runs = loaded.model.vision_parts.runs
        other = chat(images[1], "What is this?")
        done = engine.submit(0, other, sampling=GREEDY).result(60)
        assert first.error is None and done.error is None
        assert loaded.model.vision_parts.runs == runs + 1
        assert done.stats.cached_tokens < first.stats.prompt_tokens - NEW
        assert reply_tokens(engine, 0, done) == mlx_vlm_alone(folder, other)[0][:-1]
    finally:
        engine.shutdown()


def test_a_text_chat_after_an_image_chat_in_a_slot_counts_its_positions_from_zero(seeing):
    """A slot whose last prompt had an image (Qwen-VL: positions after it moved by its delta) then reads a chat of
    text only: its positions are the text's own, as mlx-vlm's alone."""
    folder, images, loaded = seeing
    engine = engine_for(loaded, parallel=1)
    try:
        assert engine.submit(0, chat(images[2], "What is this?"), sampling=GREEDY).result(60).error is None
        text = chat(None, "Paris is the capital of France.")
        done = engine.submit(0, text, sampling=GREEDY).result(60)
        assert done.error is None
        assert reply_tokens(engine, 0, done) == mlx_vlm_alone(folder, text)[0][:-1]
    finally:
        engine.shutdown()


def test_a_text_model_refuses_an_image(tiny_model_dir, tmp_path):
    from mlxchat.engine.loading.models import load_model

    loaded = load_model(str(tiny_model_dir))
    assert not loaded.sees
    engine = engine_for(loaded, parallel=1)
    try:
        done = engine.submit(0, chat(tiny_image(tmp_path / "a.png"), "hi"), sampling=GREEDY).result(60)
        assert done.refused and "does not take images" in done.error
    finally:
        engine.shutdown()


def test_without_mlx_vlm_a_vision_model_runs_as_text_and_says_how_to_install_it(gemma3, monkeypatch):
    from mlxchat.engine.loading.models import load_model

    folder, _, _ = gemma3
    monkeypatch.setitem(sys.modules, "mlx_vlm", None)  # (as if it were not installed: `import mlx_vlm` fails)
    loaded = load_model(str(folder))
    assert not loaded.sees
    assert "pip install --no-deps mlx-vlm" in loaded.vision_note and "gemma3" in loaded.vision_note


# Each tiny VLM refused images at load, with its reason (tests/vision_outcomes.py): a change fails here.
REFUSED = {**REFUSED_AT_LOAD, **REFUSED_VARIANTS}


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_a_family_the_slots_cannot_run_with_images_is_refused_images_at_load_with_its_reason(family, tmp_path):
    from mlxchat.engine.loading.models import load_model
    from mlxchat.engine.loading.progress import ModelLoadError

    folder = build_tiny_vlm(tmp_path / family, family)
    try:  # its language model chats through mlx-lm where mlx-lm has it, the refusal a note; else loading fails
        said = load_model(str(folder)).vision_note
    except ModelLoadError as e:
        said = str(e)
    assert re.search(f"model type '{FAMILIES[family]['config']['model_type']}'.*{REFUSED[family]}", said or "")


def test_a_family_whose_embeddings_do_not_line_up_with_its_tokens_is_refused_the_chat_saying_so(tmp_path, monkeypatch):
    """A family not known at load to splice its image features as blocks (LLaVA-NeXT's, taken off the list here) loads
    seeing; its first chat with an image is answered with the reason, not with a reply over misplaced embeddings."""
    from mlxchat.engine.loading import vision
    from mlxchat.engine.loading.models import load_model

    monkeypatch.setattr(vision, "SPLICING_FAMILIES", ())
    loaded = load_model(str(build_tiny_vlm(tmp_path / "llava_next", "llava_next")))
    assert loaded.sees
    engine = engine_for(loaded, parallel=1)
    try:
        done = engine.submit(0, chat(tiny_image(tmp_path / "a.png"), "What is this?"), sampling=GREEDY).result(60)
        assert re.search(r"model type 'llava_next' gives \d+ embeddings for a prompt of \d+ tokens", done.error or "")
    finally:
        engine.shutdown()


def test_the_families_listing_says_which_families_see():
    from mlxchat.engine.loading.families import describe

    [line] = [line for line in describe() if line.startswith("Families that see images")]
    assert ("alone: gemma3, gemma4, qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, mistral3, pixtral, aya_vision, "
            "smolvlm, idefics3, internvl, kimi_vl, kimi_k25, glm4v, glm_ocr, paddleocr_vl, llava_onevision, lfm2-vl."
            in line and "llava" in line)


# Each family's image markers as a user might type them (or a reply write them) in a chat's text.
MARKERS = {"gemma3": "<start_of_image>", "gemma4": "<|image|>", "mistral3": "[IMG]", "smolvlm": "<image>",
           "qwen2_vl": "<|vision_start|><|image_pad|>", "internvl": "<IMG_CONTEXT>",
           "glm4v": "<|begin_of_image|><|image|>"}


def image_positions_alone(folder: Path, messages: list[dict]) -> int:
    """How many image tokens mlx-vlm's own processor writes for the chat's images."""
    from mlx_vlm.utils import load_config, load_processor, prepare_inputs

    processor, config = load_processor(folder), load_config(folder)
    images = [p["path"] for m in messages for p in m["content"] if p["type"] == "image"]
    plain = [dict(m, content=[{"type": p["type"], **({"text": p["text"]} if p["type"] == "text" else {})}
                              for p in m["content"]]) for m in messages]
    text = processor.tokenizer.apply_chat_template(plain, add_generation_prompt=True, tokenize=False)
    token = config.get("image_token_index") or config.get("image_token_id")
    ids = prepare_inputs(processor, images=images, prompts=[text], image_token_index=token)["input_ids"]
    return int((ids == token).sum().item())


@pytest.mark.parametrize("seeing", sorted(MARKERS), indirect=True)
def test_an_image_marker_in_a_chats_text_is_read_as_text_not_as_an_image(seeing):
    """A user asks about the marker itself with an image attached, then the chat goes on after a reply that wrote it:
    both are answered, the image keeps its tokens, and the marker reaches the model as its plain-text tokens."""
    folder, images, loaded = seeing
    marker = MARKERS[loaded.model.vision_parts.model_type]
    plain = loaded.model.vision_parts.processor.tokenizer.encode(marker, add_special_tokens=False,
                                                                  split_special_tokens=True)
    image_tokens = image_positions_alone(folder, chat(images[0], "What is this?"))
    engine = engine_for(loaded, parallel=1)
    try:
        asked = chat(images[0], f"What does {marker} mean in HTML?")
        first = engine.submit(0, asked, sampling=GREEDY).result(60)
        assert first.error is None and first.stats.generated_tokens == NEW
        history = engine.core.slots[0].history
        assert sum(1 for t in history if t < 0) == image_tokens
        assert any(history[i : i + len(plain)] == plain for i in range(len(history)))
        runs = loaded.model.vision_parts.runs
        second = second_turn(asked, f"It is {marker}, an image.")
        done = engine.submit(0, second, sampling=GREEDY).result(60)
        assert done.error is None and done.stats.generated_tokens == NEW
        assert loaded.model.vision_parts.runs == runs  # (the image's K/V reused: its positions kept their place)
        assert sum(1 for t in engine.core.slots[0].history if t < 0) == image_tokens
    finally:
        engine.shutdown()


def test_the_pad_token_that_stands_for_the_markers_is_read_as_text_too(gemma3):
    """Gemma 3's markers in a text stand in as its pad token while the processor reads the prompt: a text that holds
    that token too (a random-weight reply may write it) is read as text as well."""
    _, images, loaded = gemma3
    plain = loaded.model.vision_parts.processor.tokenizer.encode("<pad>", add_special_tokens=False,
                                                                  split_special_tokens=True)
    engine = engine_for(loaded, parallel=1)
    try:
        done = engine.submit(0, chat(images[0], "Is <pad> like <start_of_image>?"), sampling=GREEDY).result(60)
        assert done.error is None and done.stats.generated_tokens == NEW
        history = engine.core.slots[0].history
        assert any(history[i : i + len(plain)] == plain for i in range(len(history)))
    finally:
        engine.shutdown()


def test_a_model_with_no_pad_token_refuses_a_marker_in_the_text_saying_what_to_change(tmp_path):
    """With no pad token, the token standing for a text's markers is another added one, here one that the processor
    writes around the image too (Gemma 3's `<end_of_image>`), which cannot be told apart: a chat with an image and the
    marker in its text is refused (the slot stays free); without the marker it is answered."""
    from mlxchat.engine.loading.models import load_model

    folder = without_pad_token(build_tiny_vlm(tmp_path / "gemma3", "gemma3"))
    image = tiny_image(tmp_path / "shot.png")
    loaded = load_model(str(folder))
    engine = engine_for(loaded, parallel=1)
    try:
        done = engine.submit(0, chat(image, "What is <start_of_image>?"), sampling=GREEDY).result(60)
        assert done.refused and "reads '<start_of_image>' as an image" in done.error
        assert "write it differently" in done.error
        assert engine.submit(0, chat(image, "What is this?"), sampling=GREEDY).result(60).error is None
    finally:
        engine.shutdown()

"""A vision tower beside streaming slots: read a slice at a time between their steps (engine.prefill.tower).

A tiny Qwen3-VL (its tower two blocks deep, with DeepStack features taken from the first) loads as the app loads it.
With prefill_stall 1.01 a slice may add next to nothing to the streams' step, so each one runs a single layer of the
tower, and the streams then have a hundred times the slice's time to themselves before the next.
"""

from __future__ import annotations

import threading

import pytest

from mlxchat.engine.events import Done, SamplingParams, TextDelta
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.plan import SlotRequest, plan_slots
from mlxchat.engine.prefill.tower import slice_tower_layers
from tests.engine.test_vision import chat, loaded_vlm, reply_tokens
from tests.tiny_vlms import mlx_vlm_alone

GREEDY = SamplingParams(max_tokens=8, ignore_eos=True, temperature=0.0)


@pytest.fixture(scope="module")
def qwen3_vl(tmp_path_factory):
    return loaded_vlm(tmp_path_factory, "qwen3_vl")


def engine_for(loaded) -> Engine:
    plan = plan_slots(SlotRequest(2, 16384, parallel_max=8, per_slot_floor=64, per_slot_min=32), None, 0,
                      loaded.kv_footprint)
    return Engine(loaded.ready, plan, prefill_chunk=3, prefill_stall=1.01)


def test_a_tower_runs_a_layer_at_a_time_between_the_streams_steps_and_its_reply_is_mlx_vlms(qwen3_vl, monkeypatch):
    from mlxchat.engine.prefill.images import ImagePrompt

    folder, images, loaded = qwen3_vl
    parts = loaded.model.vision_parts
    layers = slice_tower_layers(parts.vlm)
    assert layers == 2
    image_chat = chat(images[0], "What is this?")
    wanted = mlx_vlm_alone(folder, image_chat)[0][:-1]
    engine = engine_for(loaded)
    try:
        # Nothing streaming: the tower reads the image in the prompt's pass, whole.
        done = engine.submit(0, image_chat, sampling=GREEDY).result(60)
        assert done.error is None and parts.slices == 0
        assert reply_tokens(engine, 0, done) == wanted
        engine.clear(0, park=False)

        # Slot 1 streams a long reply (cancelled at the end: it holds the stream for as many steps as it takes).
        streaming, ended = threading.Event(), threading.Event()
        deltas: list[int] = []

        def heard(event) -> None:
            if isinstance(event, Done):
                ended.set()
            if isinstance(event, TextDelta):
                deltas.append(event.tokens)
                if len(deltas) >= 3:
                    streaming.set()

        long = engine.submit(1, chat(None, "Tell me a long story."),
                             sampling=SamplingParams(max_tokens=8000, ignore_eos=True, temperature=0.0),
                             on_event=heard)
        assert streaming.wait(60)
        heard_at_slices: list[int] = []  # the long reply's tokens so far, at each slice of the tower
        read_slice = ImagePrompt.read_slice
        monkeypatch.setattr(ImagePrompt, "read_slice",
                            lambda self, seconds: heard_at_slices.append(sum(deltas)) or read_slice(self, seconds))
        done = engine.submit(0, image_chat, sampling=GREEDY).result(60)
        still = not ended.is_set()
        engine.cancel(1)
        assert long.result(60).error is None
        assert done.error is None
        assert reply_tokens(engine, 0, done) == wanted  # (the tower's output, slice by slice, is the tower's)
        assert still, "the long reply ended before the image chat's: nothing streamed beside its tower"
        # A slice per layer, and one for what follows the last (the tower's merger, the embeddings).
        assert parts.slices == layers + 1
        # Between two slices the stream has the steps to itself for a hundred times the slice's time: many tokens.
        between = [b - a for a, b in zip(heard_at_slices, heard_at_slices[1:])]
        assert len(between) == layers and min(between) >= 5, between
    finally:
        engine.shutdown()


def test_a_tower_left_in_the_middle_ends_its_thread_and_a_new_read_starts_over(qwen3_vl):
    from mlxchat.engine.prefill.images import image_prompt

    _, images, loaded = qwen3_vl
    parts = loaded.model.vision_parts

    def towers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "mlxchat vision tower"]

    prompt = image_prompt(parts, loaded.tokenizer, chat(images[1], "What is this?"), {})
    runs = parts.runs
    assert prompt.read_slice(0.0) is False and prompt.tower_pending
    (thread,) = towers()
    prompt.drop()
    thread.join(30)
    assert not thread.is_alive() and prompt.tower_pending and parts.runs == runs

    again = image_prompt(parts, loaded.tokenizer, chat(images[1], "What is this?"), {})
    while not again.read_slice(0.0):
        pass
    assert parts.runs == runs + 1 and not again.tower_pending and not towers()

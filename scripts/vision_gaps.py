"""Streaming chats' gaps while an image chat's vision tower reads its image, against the image chat alone.

A Gemma 3 of random weights built on the fly (tests/vlm_specs.py's, widened): a SigLIP-base-sized tower (768 wide,
12 layers, 512 px in 16 px patches: 1024 patches, 256 image tokens) under a SmolLM2-135M-sized language model, float32.
Three chats stream; an image chat arrives; its first token against alone, and the streams' gap per token (p50, worst)
before and while it is read. `.venv/bin/python scripts/vision_gaps.py` from the repository root (minutes on 2 cores).
"""
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (tests.tiny_vlms, tests.vlm_specs)
from mlxchat.engine.cpu.blas import load_blas  # noqa: E402  (before anything imports mlx)

load_blas("auto")
import tests.tiny_vlms as tv  # noqa: E402
import tests.vlm_specs as specs  # noqa: E402
from mlxchat.engine.events import SamplingParams, TextDelta  # noqa: E402
from mlxchat.engine.loading.models import load_model  # noqa: E402
from mlxchat.engine.local_engine import Engine  # noqa: E402
from mlxchat.engine.plan import SlotRequest, plan_slots  # noqa: E402
from mlxchat.engine.prefill.tower import slice_tower_layers  # noqa: E402

ONE = SamplingParams(max_tokens=2, ignore_eos=True, temperature=0.0)
LONG = SamplingParams(max_tokens=3000, ignore_eos=True, temperature=0.0)


def model_folder() -> Path:
    spec = copy.deepcopy(specs.FAMILIES["gemma3"])
    text = dict(spec["config"]["text_config"], hidden_size=576, num_hidden_layers=30, intermediate_size=1536,
                num_attention_heads=9, num_key_value_heads=3, head_dim=64, query_pre_attn_scalar=64,
                mm_tokens_per_image=256)
    tower = dict(specs._SIGLIP, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 patch_size=16, image_size=512)
    spec["config"].update(text_config=text, hidden_size=576, mm_tokens_per_image=256, vision_config=tower)
    spec["processor"]["image_seq_length"] = 256
    spec["image_processor"]["size"] = {"height": 512, "width": 512}
    spec["scale"] = 0.3
    specs.FAMILIES["gemma3_wide"] = spec
    folder = Path(tempfile.gettempdir()) / "mlxchat-vision-gaps"
    if not (folder / "model.safetensors").exists():
        tv.build_tiny_vlm(folder, "gemma3_wide")
    return folder


def chat(image: Path | None, text: str) -> list[dict]:
    parts = ([{"type": "image", "path": str(image)}] if image else []) + [{"type": "text", "text": text}]
    return [{"role": "user", "content": parts}]


def first_token_s(engine: Engine, messages: list[dict]) -> float:
    started = time.perf_counter()
    engine.submit(0, messages, sampling=ONE).result(600)
    return time.perf_counter() - started


def main() -> None:
    folder = model_folder()
    image = tv.tiny_image(folder.parent / "mlxchat-vision-gaps.png", size=(640, 480))
    loaded = load_model(str(folder))
    plan = plan_slots(SlotRequest(4, 4096, parallel_max=8, per_slot_floor=64, per_slot_min=32), None, 0,
                      loaded.kv_footprint)
    engine = Engine(loaded.ready, plan)
    try:
        first_token_s(engine, chat(image, "What is this?"))  # (warm)
        engine.clear(0, park=False)
        alone = first_token_s(engine, chat(image, "What is that?"))
        engine.clear(0, park=False)
        stamps: dict[int, list[tuple[float, int]]] = {1: [], 2: [], 3: []}

        def heard(slot: int):
            return lambda e: stamps[slot].append((time.perf_counter(), e.tokens)) if isinstance(e, TextDelta) else None

        streams = [engine.submit(i, chat(None, f"Story {i}."), sampling=LONG, on_event=heard(i)) for i in stamps]
        while min(len(v) for v in stamps.values()) < 40:
            time.sleep(0.05)
        sent = time.perf_counter()
        beside = first_token_s(engine, chat(image, "What is it?"))
        for i in stamps:
            engine.cancel(i)
        for h in streams:
            h.result(60)
    finally:
        engine.shutdown()

    def gaps(lo: float, hi: float) -> list[float]:  # per token: a delta can hold several (a character's bytes)
        return [(b[0] - a[0]) / b[1] for v in stamps.values() for a, b in zip(v, v[1:]) if lo <= a[0] and b[0] <= hi]

    before, during = gaps(sent - 3.0, sent), gaps(sent, sent + beside)
    usual = statistics.median(before)
    print(f"tower layers {slice_tower_layers(loaded.model.vision_parts.vlm)}; image chat's first token alone {alone:.2f} s, "
          f"beside 3 streams {beside:.2f} s ({beside / alone:.2f}x)")
    print(f"streams' gap per token before: p50 {usual * 1e3:.1f} ms, worst {max(before) * 1e3:.1f}; while the image "
          f"is read: p50 {statistics.median(during) * 1e3:.1f} ms ({statistics.median(during) / usual:.1f}x), "
          f"worst {max(during) * 1e3:.1f} ms ({max(during) / usual:.1f}x)")


if __name__ == "__main__":
    main()

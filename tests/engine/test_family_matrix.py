"""Every model module of the installed mlx-lm that can be made tiny, driven as the app drives it.

For each module, tests/tiny_configs.py generates a tiny config from its ModelArgs; random weights
and the tiny tokenizer are saved as a model folder. The engine's model is loaded from that folder
by `load_model` on a worker thread, which also starts the engine (as app.session.start does); the
reference is a separate object loaded by mlx-lm, generating each prompt alone. Three slots busy at
once, prefill in 4-token chunks, then a second turn in one slot: every token must be mlx-lm's.
A family the engine refuses must be refused at load, naming what is missing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from mlxchat.engine.events import SamplingParams
from tests.engine.test_families import alone
from tests.tiny_configs import NotTiny, is_model_module, model_modules, tiny_config

PROMPTS = [[(7 * i + 3 * j) % 250 + 1 for j in range(n)] for i, n in enumerate((5, 13, 34))]
NEW = 8
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)


def _configs() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    tiny, not_tiny = {}, {}
    for name in model_modules():
        if not is_model_module(name):
            continue
        try:
            tiny[name] = tiny_config(name)
        except NotTiny as exc:
            not_tiny[name] = str(exc)
    return tiny, not_tiny


TINY, NOT_TINY = _configs()


def save(config: dict[str, Any], path: Path) -> Path:
    """A model folder: the config, seeded random weights, tests/tiny_model.py's tokenizer."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from tests.tiny_configs import VOCAB, build
    from tests.tiny_model import build_tokenizer, write_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(VOCAB)
    write_tokenizer(path, tok, dict(config, eos_token_id=tok.token_to_id("<|im_end|>")))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(build(config, scale=2.0).parameters())))
    return path


def start_as_the_app(folder: Path, cache_dir: Path) -> Any:
    """load_model and the engine's start on a worker thread, as app.session.start does; the engine or the error."""
    from mlxchat.engine.loading.models import load_model
    from mlxchat.engine.plan import SlotRequest, plan_slots
    from mlxchat.engine.local_engine import Engine

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            loaded = load_model(str(folder), cache_dir=cache_dir)
            request = SlotRequest(4, 512, parallel_max=8, per_slot_floor=64, per_slot_min=32)
            plan = plan_slots(request, loaded.trained_ctx, loaded.kv_bytes_per_token, loaded.kv_footprint)
            box["engine"] = Engine(
                loaded.model, loaded.tokenizer, plan, prefill_chunk=4, padded_prefill=loaded.padded_prefill
            )
        except Exception as exc:
            box["error"] = exc

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["engine"]


def generated(engine: Any, slot: int, prompt: list[int]) -> list[int]:
    """The tokens the slot generated after `prompt` and stored (all but the last one sampled)."""
    return engine.call(lambda: list(engine.core.slots[slot].history[len(prompt) :])).result(30)


@pytest.mark.parametrize("family", sorted(TINY))
def test_family_as_the_app_runs_it_equals_mlx_lm_alone_or_is_refused_at_load(family, tmp_path: Path):
    from mlx_lm.utils import load_model as mlx_lm_load

    from mlxchat.engine.loading.families import REFUSED_FAMILIES
    from mlxchat.engine.loading.models import ModelLoadError

    folder = save(TINY[family], tmp_path / family)
    try:
        engine = start_as_the_app(folder, tmp_path / "cache")
    except ModelLoadError as exc:
        assert family in REFUSED_FAMILIES or "not supported by mlxchat's engine" in str(exc), f"{family}: {exc}"
        assert "mlxchat" in str(exc) and len(str(exc)) > 40, f"{family}: the refusal names nothing: {exc}"
        return
    assert family not in REFUSED_FAMILIES, f"{family} is listed as refused but loaded"
    reference, _ = mlx_lm_load(folder)
    try:
        expected = [alone(reference, p, NEW) for p in PROMPTS]
        handles = [engine.submit(i, tokens=p, sampling=GREEDY) for i, p in enumerate(PROMPTS)]
        dones = [h.result(120) for h in handles]
        assert [d.error for d in dones] == [None] * len(PROMPTS), family
        for i, (p, want) in enumerate(zip(PROMPTS, expected)):
            assert generated(engine, i, p) == want[:-1], f"{family}, slot {i}"

        turn = PROMPTS[2] + expected[2] + [5, 6, 7]
        second = engine.submit(2, tokens=turn, sampling=GREEDY).result(120)
        assert second.error is None, family
        assert generated(engine, 2, turn) == alone(reference, turn, NEW)[:-1], f"{family}, second turn"
    finally:
        engine.shutdown()


def test_the_families_mlxchat_models_names_as_checked_are_in_the_matrix():
    """`mlxchat models` says which families are checked token for token: each is one this matrix runs."""
    from mlxchat.engine.loading.families import REFUSED_FAMILIES, TESTED_FAMILIES

    assert set(TESTED_FAMILIES) <= set(TINY) - set(REFUSED_FAMILIES), set(TESTED_FAMILIES) - set(TINY)


def test_the_matrix_covers_most_modules():
    """A guard on the generator: most modules must be made tiny (each one left out says why)."""
    assert len(TINY) >= 90, NOT_TINY

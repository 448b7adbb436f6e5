"""Every model module of the installed mlx-lm that can be made tiny, driven as the app drives it.

For each module, tests/tiny_configs.py generates a tiny config from its ModelArgs; random weights
and the tiny tokenizer are saved as a model folder. The engine's model is loaded from that folder
by `load_model` on a worker thread, which also starts the engine (as app.session.start does); the
reference is a separate object loaded by mlx-lm, generating each prompt alone, its K/V rounded to the type the
slots store them in (kv_dtype "auto": float16 where the CPU kernels run). Three slots busy at once, prefill in
4-token chunks, then a second turn in one slot: every token must be mlx-lm's.
A family the engine refuses must be refused at load, naming what is missing.

`make test-kv-matrix` runs the matrix once for each kv_dtype (MLXCHAT_MATRIX_KV_DTYPES names them; `make test`
runs "auto"): under q8, a family whose heads are not whole groups of 32 values is refused at load, saying so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mlxchat.engine.events import SamplingParams
from tests.engine.test_families import alone
from tests.family_outcomes import NOT_TINY as NOT_TINY_LISTED
from tests.family_outcomes import REFUSED_AT_LOAD
from tests.markers import needs_cpu
from tests.started import start_as_the_app
from tests.tiny_configs import NotTiny, is_model_module, model_modules, tiny_config

PROMPTS = [[(7 * i + 3 * j) % 250 + 1 for j in range(n)] for i, n in enumerate((5, 13, 34))]
NEW = 8
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)
KV_DTYPES = os.environ.get("MLXCHAT_MATRIX_KV_DTYPES", "auto").split(",")
Q8_REFUSAL = 'kv_dtype = "q8" stores K/V in groups of'


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


def generated(engine: Any, slot: int, prompt: list[int]) -> list[int]:
    """The tokens the slot generated after `prompt` and stored (all but the last one sampled)."""
    return engine.call(lambda: list(engine.core.slots[slot].history[len(prompt) :])).result(30)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("family", sorted(TINY))
def test_family_as_the_app_runs_it_equals_mlx_lm_alone_or_is_refused_at_load(family, kv_dtype, tmp_path: Path):
    """The outcome tests/family_outcomes.py pins for the family: it matches mlx-lm alone token for token, or
    its load is refused with the reason listed there. A family that changes outcome fails, named."""
    from mlx_lm.utils import load_model as mlx_lm_load

    from mlxchat.engine.loading.models import ModelLoadError

    folder = save(TINY[family], tmp_path / family)
    try:
        engine = start_as_the_app(folder, tmp_path / "cache", kv_dtype=kv_dtype)
    except ModelLoadError as exc:
        if kv_dtype == "q8" and family not in REFUSED_AT_LOAD and Q8_REFUSAL in str(exc):
            return  # (heads of 16 values, say: the type cannot store them, and says so)
        assert family in REFUSED_AT_LOAD, f"{family} matched mlx-lm alone and is now refused at load: {exc}"
        assert REFUSED_AT_LOAD[family] in str(exc), f"{family} is refused for another reason than listed: {exc}"
        return
    assert family not in REFUSED_AT_LOAD, f"{family} was refused at load and now loads: tests/family_outcomes.py"
    reference, _ = mlx_lm_load(folder)
    try:
        kv_dtype = engine.core.plan.kv_type.name  # the reference's K/V rounded as the slots store them
        expected = [alone(reference, p, NEW, kv_dtype) for p in PROMPTS]
        handles = [engine.submit(i, tokens=p, sampling=GREEDY) for i, p in enumerate(PROMPTS)]
        dones = [h.result(120) for h in handles]
        assert [d.error for d in dones] == [None] * len(PROMPTS), family
        for i, (p, want) in enumerate(zip(PROMPTS, expected)):
            assert generated(engine, i, p) == want[:-1], f"{family}, slot {i}"

        turn = PROMPTS[2] + expected[2] + [5, 6, 7]
        second = engine.submit(2, tokens=turn, sampling=GREEDY).result(120)
        assert second.error is None, family
        assert generated(engine, 2, turn) == alone(reference, turn, NEW, kv_dtype)[:-1], f"{family}, second turn"
    finally:
        engine.shutdown()


@needs_cpu  # (the outcomes are the CPU build's: on CUDA one more module, nemotron_h, is made tiny)
def test_every_module_has_the_outcome_listed_for_it():
    """The modules that match (the engine's TESTED_FAMILIES, which `mlxchat models` names), those refused at load and
    those not made tiny (tests/family_outcomes.py) are every module of the installed mlx-lm, once each, each not
    made tiny for the reason listed."""
    from mlxchat.engine.loading.families import TESTED_FAMILIES

    match, refused, not_tiny = set(TESTED_FAMILIES), set(REFUSED_AT_LOAD), set(NOT_TINY_LISTED)
    assert not (match & refused or match & not_tiny or refused & not_tiny)
    assert match | refused == set(TINY), {"made tiny, outcome not listed": sorted(set(TINY) - match - refused),
                                          "listed, not made tiny": sorted((match | refused) - set(TINY))}
    assert not_tiny == set(NOT_TINY), {"not made tiny, not listed": sorted(set(NOT_TINY) - not_tiny),
                                       "listed, made tiny now": sorted(not_tiny - set(NOT_TINY))}
    wrong = {name: why for name, why in NOT_TINY.items() if NOT_TINY_LISTED[name] not in why}
    assert not wrong, wrong

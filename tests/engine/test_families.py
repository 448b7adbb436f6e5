"""Every family the engine claims, token for token against mlx-lm generating each prompt alone.

Tiny random-weight models of each family (tests/tiny_families.py) with 8-token windows; four
prompts of 5 to 34 tokens in four slots at once, greedy, with the default prefill chunk and a
4-token one; then a second turn that extends a slot's history and one that edits it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.engine.events import SamplingParams
from mlxchat.engine.plan import SlotPlan, SlotRequest, plan_slots
from mlxchat.engine.local_engine import Engine
from mlxchat.engine.loading.batch_check import ready_for_slots
from tests.tiny_families import FAMILIES, LLAMA4, WINDOW, build_family, save_family
from tests.tiny_gguf import write_other_architecture_gguf

PROMPTS = [[(7 * i + 3 * j) % 250 + 1 for j in range(n)] for i, n in enumerate((5, 13, 21, 34))]
NEW = 10
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)
# Families with layers that cannot roll back to an arbitrary token (window rings, recurrent states).
NO_ROLLBACK = {"llama_layer_types", "gemma3_text", "gemma4_text", "falcon_h1", "cohere2", "gpt_oss", "qwen3_next", "lfm2", "mamba2"}


def plan(parallel: int = 4, ctx_size: int = 512, kv_footprint=None) -> SlotPlan:
    request = SlotRequest(parallel, ctx_size, parallel_max=8, per_slot_floor=64, per_slot_min=32)
    return plan_slots(request, trained_ctx=None, kv_bytes_per_token=0, kv_footprint=kv_footprint)


def alone(model, prompt: list[int], n: int = NEW, kv_dtype: str | None = None) -> list[int]:
    """mlx-lm on its own: the whole prompt through its own caches (make_prompt_cache), then greedy steps; with
    `kv_dtype`, each new key and value rounded to it before the cache keeps it (as the slots store them)."""
    import mlx.core as mx

    cache = rounded_caches(model, kv_dtype)
    logits = model(mx.array([prompt]), cache=cache)[:, -1]
    out = []
    for _ in range(n):
        token = int(mx.argmax(logits, axis=-1).item())
        out.append(token)
        logits = model(mx.array([[token]]), cache=cache)[:, -1]
    return out


def rounded_caches(model, kv_dtype: str | None) -> list:
    """mlx-lm's own caches for `model`; with `kv_dtype`, each new key and value rounded by MLX's own operations as
    the setting says (not by the engine's code under test), then widened back: the values the slots must hold."""
    from mlx_lm.models.cache import make_prompt_cache

    caches = make_prompt_cache(model)
    if kv_dtype is None:
        return caches

    def rounded(x):
        return stored_by_mlx(x, kv_dtype).astype(x.dtype)

    def wrap(cache) -> None:
        for part in getattr(cache, "caches", ()):
            wrap(part)
        if hasattr(cache, "update_and_fetch") and hasattr(cache, "keys") and not hasattr(cache, "caches"):
            store = cache.update_and_fetch
            cache.update_and_fetch = lambda k, v: store(rounded(k), rounded(v))

    for c in caches:
        wrap(c)
    return caches


def q8_parts(x):
    """`x` in MLX's affine 8-bit format, as kv_dtype = "q8" documents it: mx.quantize in groups of 64 values, or
    of 32 where 64 does not divide the head."""
    import mlx.core as mx

    group = 64 if x.shape[-1] % 64 == 0 else 32
    return mx.quantize(x, group_size=group, bits=8), group


def stored_by_mlx(x, kv_dtype: str):
    """`x` as `kv_dtype` keeps it, read back in float32 by MLX's own operations (astype, mx.dequantize)."""
    import mlx.core as mx

    if kv_dtype == "q8":
        (w, scales, biases), group = q8_parts(x)
        return mx.dequantize(w, scales, biases, group_size=group, bits=8)
    return x.astype(getattr(mx, kv_dtype)).astype(mx.float32)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from mlx_lm.utils import load_tokenizer

    return load_tokenizer(tiny_model_dir)


def generated(engine: Engine, slot: int, prompt: list[int]) -> list[int]:
    """The tokens the slot generated after `prompt` and stored (all but the last one sampled)."""
    return engine.call(lambda: list(engine.core.slots[slot].history[len(prompt) :])).result(10)


def each_slot_equals_alone(engine: Engine, prompts: list[list[int]], expected: list[list[int]],
                           sampling: SamplingParams, label: str) -> None:
    """Sends prompts[i] to slot i, all at once: every reply ends without error, and each slot generated expected[i]
    (mlx-lm alone's tokens) but the last."""
    handles = [engine.submit(i, tokens=p, sampling=sampling) for i, p in enumerate(prompts)]
    assert [h.result(60).error for h in handles] == [None] * len(prompts)
    for i, (p, want) in enumerate(zip(prompts, expected)):
        assert generated(engine, i, p) == want[:-1], f"{label}, slot {i}"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_in_four_slots_equals_mlx_lm_alone(family, tokenizer):
    model = build_family(family)
    expected = [alone(model, p) for p in PROMPTS]
    for chunk in (256, 4):
        engine = Engine(ready_for_slots(model, tokenizer), plan(), prefill_chunk=chunk)
        try:
            handles = [engine.submit(i, tokens=p, sampling=GREEDY) for i, p in enumerate(PROMPTS)]
            dones = [h.result(60) for h in handles]
            assert [d.error for d in dones] == [None] * 4
            for i, (p, want) in enumerate(zip(PROMPTS, expected)):
                assert generated(engine, i, p) == want[:-1], f"{family}, chunk {chunk}, slot {i}"
                assert dones[i].stats.generated_tokens == NEW

            # Second turns in slots 0 and 1 at once (one prefill pass, rows at different offsets) reuse all they hold.
            turns = {i: PROMPTS[i] + expected[i] + [5, 6, 7, 8, 9, 10, 11] for i in (0, 1)}
            handles = {i: engine.submit(i, tokens=t, sampling=GREEDY) for i, t in turns.items()}
            for i, t in turns.items():
                second = handles[i].result(60)
                assert second.stats.cached_tokens == len(PROMPTS[i]) + NEW - 1
                assert second.stats.refilled_tokens == 0
                assert generated(engine, i, t) == alone(model, t)[:-1], f"{family}, chunk {chunk}, turn 2, slot {i}"

            # An edited turn keeps a prefix only where every layer can go back to it exactly.
            edited = PROMPTS[1][:10] + [99, 98, 97]
            third = engine.submit(1, tokens=edited, sampling=GREEDY).result(60)
            assert generated(engine, 1, edited) == alone(model, edited)[:-1]
            if family in NO_ROLLBACK:
                assert (third.stats.cached_tokens, third.stats.refilled_tokens) == (0, 10)
                assert engine.snapshot().slots[1].refilled_tokens == 10
            else:
                assert (third.stats.cached_tokens, third.stats.refilled_tokens) == (10, 0)
        finally:
            engine.shutdown()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_batched_pass_logits_equal_mlx_lm_alone(family):
    """Greedy tokens can hide a small attention error; logits cannot. Four slots hold 5 to 34 tokens,
    then one pass adds a 4-token chunk to each (right-padded rows at different offsets) and one
    decode pass a token: every real position's logits must equal mlx-lm's alone, to float32 rounding."""
    batched_logits_equal_alone(build_family(family), family, None, 1e-4)


def batched_logits_equal_alone(model, family: str, kv_dtype: str | None, tolerance: float):
    """The logits test above for `model`, its slots storing K/V as `kv_dtype`, against mlx-lm alone over K/V rounded
    alike, to `tolerance`; returns the slots' store."""
    import mlx.core as mx

    from mlxchat.engine.kv import attention
    from mlxchat.engine.kv.kv_types import KVType
    from mlxchat.engine.kv.slot_store import SlotKVStore

    store = SlotKVStore.for_model(model, 4, 64, attention.install(model), KVType(kv_dtype))
    histories = [list(p) for p in PROMPTS]
    for row, prompt in enumerate(PROMPTS):
        model(mx.array([prompt]), cache=store.batch([row], len(prompt)))
        store.commit([row], [len(prompt)])
    for counts in ([4, 2, 4, 3], [1, 1, 1, 1]):
        chunks = [[(11 * r + k) % 300 + 2 for k in range(n)] for r, n in enumerate(counts)]
        width = max(counts)
        inputs = mx.array([c + c[-1:] * (width - len(c)) for c in chunks])
        logits = model(inputs, cache=store.batch([0, 1, 2, 3], width, counts))
        store.commit([0, 1, 2, 3], counts)
        for row, chunk in enumerate(chunks):
            histories[row] += chunk
            want = model(mx.array([histories[row]]), cache=rounded_caches(model, kv_dtype))[0, -len(chunk) :]
            got = logits[row, : len(chunk)]
            assert mx.allclose(got, want, atol=tolerance, rtol=tolerance).item(), (
                f"{family}, {kv_dtype}, row {row}: max diff {mx.abs(got - want).max().item()}"
            )
    return store


@pytest.mark.parametrize("family", list(FAMILIES))
def test_quantized_family_as_stored_equals_mlx_lm_alone(family, tokenizer):
    """4-bit weights kept as stored (as on Metal and CUDA, or weights_dtype = "keep"), a small prefill chunk."""
    import mlx.core as mx
    import mlx.nn as nn

    model = build_family(family)
    # As mlx-lm's converter does, layers too narrow for a group stay in float (MLA's 16-wide heads here).
    quantizable = lambda _, m: hasattr(m, "to_quantized") and m.weight.shape[-1] % 32 == 0  # noqa: E731
    nn.quantize(model, group_size=32, bits=4, class_predicate=quantizable)
    mx.eval(model.parameters())
    expected = [alone(model, p) for p in PROMPTS]
    engine = Engine(ready_for_slots(model, tokenizer), plan(), prefill_chunk=4)
    try:
        each_slot_equals_alone(engine, PROMPTS, expected, GREEDY, family)
    finally:
        engine.shutdown()


def test_window_layers_hold_only_the_window(tokenizer):
    """gemma3_text: two 8-token window layers and two full ones; a slot of 128 tokens holds 8 in the windows."""
    from mlxchat.engine.kv.kinds import footprint

    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    model = build_family("gemma3_text")
    cache = make_prompt_cache(model)
    model(mx.array([[0]]), cache=cache)
    kv = footprint(cache)
    assert kv.windows == ((WINDOW, kv.full_bytes_per_token // 2),) * 2
    sized = plan(kv_footprint=kv)
    assert sized.kv_bytes_per_slot == kv.full_bytes_per_token * 128 + 2 * WINDOW * kv.windows[0][1]
    engine = Engine(ready_for_slots(model, tokenizer), sized)
    try:
        engine.submit(0, tokens=PROMPTS[3], sampling=GREEDY).result(60)
        assert engine.snapshot().kv_bytes_allocated == sized.kv_bytes
    finally:
        engine.shutdown()


def test_recurrent_state_is_a_constant_per_slot(tokenizer):
    model = build_family("mamba2")
    engine = Engine(ready_for_slots(model, tokenizer), plan())
    try:
        engine.submit(0, tokens=PROMPTS[0], sampling=GREEDY).result(60)
        short = engine.snapshot().slots[0].kv_bytes_used
        engine.submit(0, tokens=PROMPTS[3], sampling=GREEDY).result(60)
        assert engine.snapshot().slots[0].kv_bytes_used == short > 0
        engine.clear(0)
        engine.submit(1, tokens=PROMPTS[2], sampling=GREEDY).result(60)
        # A cleared slot starts from a zero state: the same prompt again gives mlx-lm's tokens.
        engine.submit(0, tokens=PROMPTS[2], sampling=GREEDY).result(60)
        assert generated(engine, 0, PROMPTS[2]) == alone(model, PROMPTS[2])[:-1]
    finally:
        engine.shutdown()


def test_family_the_engine_cannot_run_is_refused_at_load(tmp_path: Path, capsys):
    from mlxchat.app.cli import main
    from mlxchat.engine.loading.models import ModelLoadError, load_model

    folder = save_family(LLAMA4, tmp_path / "llama4")
    with pytest.raises(ModelLoadError, match="model type 'llama4'.*ChunkedKVCache"):
        load_model(str(folder))
    assert main(["models", "--model", str(folder)]) == 2
    assert "'llama4' is not supported" in capsys.readouterr().out
    assert main(["bench", "--model", str(folder), "--slots", "1", "--engines", "mlxchat"]) == 2
    assert "mlxchat: model type 'llama4'" in capsys.readouterr().err


def test_models_command_lists_kinds_and_the_models_layers(tmp_path: Path, capsys):
    from mlxchat.app.cli import main

    folder = save_family("lfm2", tmp_path / "lfm2")
    assert main(["models", "--model", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "RotatingKVCache" in out and "mamba2" in out
    assert "(lfm2): 2 x ArraysCache, 2 x KVCache" in out


@pytest.mark.parametrize("family", ["mamba2", "gemma3_text"])
def test_reply_that_stops_mid_pass_leaves_the_state_exact(family, tiny_model_dir):
    """A stop token is seen after the next decode pass already fed it: that pass's write is undone,
    also in a recurrent state, so the next turn continues from exactly what the slot said."""
    from mlx_lm.utils import load_tokenizer

    model = build_family(family)
    prompt = PROMPTS[2]
    want = alone(model, prompt)
    stop = next(i for i in range(2, NEW) if want[i] not in want[:i])
    tokenizer = load_tokenizer(tiny_model_dir, eos_token_ids=[want[stop]])
    engine = Engine(ready_for_slots(model, tokenizer), plan())
    try:
        done = engine.submit(0, tokens=prompt, sampling=SamplingParams(max_tokens=NEW)).result(60)
        assert (done.reason, done.stats.generated_tokens) == ("stop", stop)
        turn2 = prompt + want[: stop + 1] + [5, 6, 7]
        second = engine.submit(0, tokens=turn2, sampling=GREEDY).result(60)
        assert second.stats.cached_tokens == len(prompt) + stop
        assert generated(engine, 0, turn2) == alone(model, turn2)[:-1]
    finally:
        engine.shutdown()


@pytest.mark.parametrize("family", ["gemma3_text", "qwen3_next"])
def test_repartition_keeps_window_and_recurrent_slots_exact(family, tokenizer):
    model = build_family(family)
    engine = Engine(ready_for_slots(model, tokenizer), plan(parallel=4, ctx_size=512))
    try:
        for i, p in enumerate(PROMPTS):
            engine.submit(i, tokens=p, sampling=GREEDY).result(60)
        survived = engine.repartition(plan(parallel=2, ctx_size=256)).result(60)
        assert survived == {0: True, 1: True, 2: False, 3: False}
        turn2 = PROMPTS[1] + alone(model, PROMPTS[1]) + [5, 6, 7]
        second = engine.submit(1, tokens=turn2, sampling=GREEDY).result(60)
        assert second.stats.cached_tokens == len(PROMPTS[1]) + NEW - 1
        assert generated(engine, 1, turn2) == alone(model, turn2)[:-1]
    finally:
        engine.shutdown()


def test_gguf_of_another_architecture_exits_2_naming_it(tmp_path: Path, capsys):
    from mlxchat.app.cli import main

    path = write_other_architecture_gguf(tmp_path / "other.gguf")
    assert main(["doctor", "--model", str(path)]) == 2  # a refused family: the settings must change, as for `models`
    assert main(["models", "--model", str(path)]) == 2
    assert "is a 'qwen2' model" in capsys.readouterr().out

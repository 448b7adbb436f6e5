"""GGUF import: tiny llama GGUFs written from a known MLX folder must load back as the same model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import gguf
import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.utils import load_model as mlx_load_model
from mlx_lm.utils import load_tokenizer

from mlxchat.engine.loading import gguf_import
from mlxchat.app.paths import models_cache_dir
from mlxchat.engine.loading.gguf_import import convert_gguf, read_gguf
from mlxchat.engine.loading.gguf_vocab import build_tokenizer, write_tokenizer_files
from mlxchat.engine.loading.models import ModelLoadError, Progress, LoadOptions, load_model
from tests.tiny_gguf import write_other_architecture_gguf, write_tiny_gguf

QUANTIZED = ["Q8_0", "Q4_0", "Q4_1"]
TEXTS = [
    "Hello, how are you today?",
    "Numbers like 12345 and 8192.",
    "Caf\u00e9, na\u00efve, \u00fcber, \u65e5\u672c\u8a9e",
    "emoji \U0001f600 and  two spaces\nnew line",
    "<|im_start|>user\nParis<|im_end|>",
]


def prompt_ids(folder: Path) -> list[int]:
    """A chat-templated prompt, tokenized by the folder's own tokenizer."""
    tok = load_tokenizer(folder)
    messages = [{"role": "user", "content": "Paris is the capital of which country? Hello, how are you today?"}]
    return tok.apply_chat_template(messages, add_generation_prompt=True)


def logits(model, ids: list[int]) -> np.ndarray:
    """The float32 logits of every position of `ids`."""
    return np.array(model(mx.array([ids]))[0].astype(mx.float32))


def greedy(model, ids: list[int], n: int = 16) -> list[int]:
    """n greedy tokens after `ids` (recomputing the whole sequence: the model is tiny)."""
    out = list(ids)
    for _ in range(n):
        out.append(int(mx.argmax(model(mx.array([out]))[0, -1]).item()))
    return out[len(ids) :]


def source_with(folder: Path, transform) -> object:
    """The folder's model with every 2-D weight replaced by transform(float32 numpy weight)."""
    model, _ = mlx_load_model(folder)
    new = [(k, mx.array(transform(np.array(v)).astype(np.float32))) for k, v in tree_flatten(model.parameters())]
    model.load_weights([(k, v) for k, v in new if v.ndim == 2], strict=False)
    return model


def llama_cpp_roundtrip(qtype: str):
    """What llama.cpp's own code (gguf-py) reads back from a weight stored as `qtype`."""
    t = gguf.GGMLQuantizationType[qtype]
    if qtype == "F16":
        return lambda w: w.astype(np.float16)
    return lambda w: gguf.quants.dequantize(gguf.quants.quantize(w, t), t)


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="module")
def tied_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with tied embeddings (no lm_head), like SmolLM2."""
    folder = tmp_path_factory.mktemp("tied") / "tiny-tied"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    weights = mx.load(str(folder / "model.safetensors"))
    del weights["lm_head.weight"]
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    return folder


def converted(tiny_model_dir: Path, gguf_dir: Path, qtype: str, weights_dtype: str) -> tuple[Any, Any, list[int]]:
    """The tiny model written as a `qtype` GGUF and loaded back, the source with the weights llama.cpp would
    read from that file (the reference), and a prompt."""
    path = write_tiny_gguf(tiny_model_dir, gguf_dir / f"tiny-{qtype}.gguf", qtype)
    loaded = load_model(str(path), LoadOptions(weights_dtype, cache_dir=models_cache_dir()))
    # F16 storage rounds the 2-D weights; the reference is the source rounded the same way.
    reference = source_with(tiny_model_dir, llama_cpp_roundtrip(qtype) if qtype != "F32" else lambda w: w)
    return loaded, reference, prompt_ids(tiny_model_dir)


@pytest.mark.parametrize("qtype", ["F32", "F16"])
def test_float_gguf_gives_the_source_model(qtype: str, tiny_model_dir: Path, gguf_dir: Path) -> None:
    loaded, reference, ids = converted(tiny_model_dir, gguf_dir, qtype, "float32")
    assert loaded.dtype == "float32"
    assert loaded.source.kind == "gguf"
    np.testing.assert_allclose(logits(loaded.model, ids), logits(reference, ids), atol=1e-5, rtol=0)
    assert greedy(loaded.model, ids) == greedy(reference, ids)


@pytest.mark.parametrize("qtype", QUANTIZED)
def test_quantized_gguf_matches_llama_cpp_dequantization(qtype: str, tiny_model_dir: Path, gguf_dir: Path) -> None:
    loaded, reference, ids = converted(tiny_model_dir, gguf_dir, qtype, "float32")
    # Both hold exactly the weights llama.cpp dequantizes to, so only float32 summation order may differ.
    np.testing.assert_allclose(logits(loaded.model, ids), logits(reference, ids), atol=1e-4, rtol=0)
    assert greedy(loaded.model, ids) == greedy(reference, ids)


@pytest.mark.parametrize("qtype", QUANTIZED)
def test_quantized_weights_are_within_one_step_of_the_source(
    qtype: str, tiny_model_dir: Path, gguf_dir: Path
) -> None:
    path = write_tiny_gguf(tiny_model_dir, gguf_dir / f"tiny-{qtype}.gguf", qtype)
    held = load_model(str(path), LoadOptions("float32", cache_dir=models_cache_dir()))
    loaded = dict(tree_flatten(held.model.parameters()))
    source = dict(tree_flatten(mlx_load_model(tiny_model_dir)[0].parameters()))
    for name, w in source.items():
        if w.ndim != 2:
            continue
        blocks = np.array(w).reshape(w.shape[0], -1, 32)
        error = np.abs(np.array(loaded[name]).reshape(blocks.shape) - blocks)
        # One quantization step per 32-weight block: rounding costs half a step; Q4_0's asymmetric
        # range [-8d, 7d] can clip the far side by a whole step; fp16 scales add far less than that.
        if qtype == "Q8_0":
            step = np.abs(blocks).max(-1, keepdims=True) / 127
        elif qtype == "Q4_0":
            step = np.abs(blocks).max(-1, keepdims=True) / 8
        else:
            step = (blocks.max(-1, keepdims=True) - blocks.min(-1, keepdims=True)) / 15
        assert (error <= step * 1.01).all(), name


def test_q8_logits_stay_close_to_the_unquantized_source(tiny_model_dir: Path, gguf_dir: Path) -> None:
    path = write_tiny_gguf(tiny_model_dir, gguf_dir / "tiny-Q8_0.gguf", "Q8_0")
    ids = prompt_ids(tiny_model_dir)
    got = logits(load_model(str(path), LoadOptions("float32", cache_dir=models_cache_dir())).model, ids)
    want = logits(mlx_load_model(tiny_model_dir)[0], ids)
    # 8-bit steps are 1/254 of a block's range; the tiny model's x4 random weights amplify that to
    # a fraction of a logit. (At 4 bits this random model is too chaotic for a logit-level bound:
    # the weight bound and the llama.cpp comparison above cover Q4_0/Q4_1.)
    assert np.abs(got - want).max() < 0.5 * want.std()
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.85


@pytest.mark.parametrize("qtype", QUANTIZED)
def test_kept_quantized_model_runs_mlx_quantized_layers(qtype: str, tiny_model_dir: Path, gguf_dir: Path) -> None:
    loaded, reference, ids = converted(tiny_model_dir, gguf_dir, qtype, "keep")
    got, want = logits(loaded.model, ids), logits(reference, ids)

    assert loaded.dtype == f"q{8 if qtype == 'Q8_0' else 4} (group 32)"
    # MLX's quantized embedding returns float16 rows (its scales are float16): a 2^-11 relative rounding
    # that this tiny model amplifies to a few hundredths of a logit.
    assert np.abs(got - want).max() < 0.05 * want.std()
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.95


def test_tied_embeddings_have_no_output_tensor(tied_model_dir: Path, gguf_dir: Path) -> None:
    path = write_tiny_gguf(tied_model_dir, gguf_dir / "tiny-tied-Q4_1.gguf", "Q4_1")
    tensors = mx.load(str(path))
    assert "output.weight" not in tensors and "token_embd.weight" in tensors

    loaded = load_model(str(path), LoadOptions("float32", cache_dir=models_cache_dir()))
    reference = source_with(tied_model_dir, llama_cpp_roundtrip("Q4_1"))
    ids = prompt_ids(tied_model_dir)
    assert loaded.config["tie_word_embeddings"] is True
    np.testing.assert_allclose(logits(loaded.model, ids), logits(reference, ids), atol=1e-4, rtol=0)


def test_tokenizer_from_gguf_matches_the_source(tiny_model_dir: Path, gguf_dir: Path) -> None:
    path = write_tiny_gguf(tiny_model_dir, gguf_dir / "tiny-F16.gguf", "F16")
    got = load_model(str(path), LoadOptions("keep", cache_dir=models_cache_dir())).tokenizer
    want = load_tokenizer(tiny_model_dir)
    messages = [{"role": "user", "content": "Hello, how are you today?"}]
    chat = want.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    for text in [*TEXTS, chat]:
        assert got.encode(text) == want.encode(text), text
        assert got.decode(got.encode(text)) == text
    assert got.apply_chat_template(messages, add_generation_prompt=True) == want.apply_chat_template(
        messages, add_generation_prompt=True
    )
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert got.encode(special) == [want.convert_tokens_to_ids(special)]
    assert got.eos_token_ids == {want.convert_tokens_to_ids("<|im_end|>")}


def test_add_bos_token_puts_one_bos_first(tiny_model_dir: Path, gguf_dir: Path, tmp_path: Path) -> None:
    path = write_tiny_gguf(tiny_model_dir, gguf_dir / "tiny-F32.gguf", "F32")
    meta = read_gguf(path)[1]
    meta.update({"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": 1})
    assert build_tokenizer(meta).encode("Hello").ids[0] == 1

    write_tokenizer_files(meta, tmp_path)
    ids = load_tokenizer(tmp_path).encode("Hello")
    assert ids[0] == 1 and 1 not in ids[1:]


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models cache of the test's own: the session's shared one may hold the conversion already."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_conversion_is_cached(tiny_model_dir: Path, gguf_dir: Path, own_cache: Path) -> None:
    path = write_tiny_gguf(tiny_model_dir, gguf_dir / "tiny-Q4_0.gguf", "Q4_0")
    first: list[Progress] = []
    folder = convert_gguf(path, models_cache_dir(), first.append)
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    second: list[Progress] = []

    assert convert_gguf(path, models_cache_dir(), second.append) == folder
    assert folder.parent == models_cache_dir() and folder.parent.is_relative_to(own_cache)
    assert any(p.stage == "Converting tiny-Q4_0.gguf" for p in first)
    assert not any(p.stage.startswith("Converting") for p in second)
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]


def test_interrupted_conversion_is_not_reused(
    tiny_model_dir: Path, gguf_dir: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_tiny_gguf(tiny_model_dir, gguf_dir / "tiny-Q8_0.gguf", "Q8_0")
    leftovers: list[Path] = []

    def killed(meta, folder: Path) -> None:
        # What a killed process leaves behind: the work folder with weights and config but no tokenizer.
        leftovers.append(shutil.copytree(folder, folder.with_name(folder.name + "-killed")))
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(gguf_import, "write_tokenizer_files", killed)
        with pytest.raises(KeyboardInterrupt):
            convert_gguf(path, models_cache_dir())
    assert list(models_cache_dir().iterdir()) == leftovers
    assert (leftovers[0] / "config.json").is_file()

    events: list[Progress] = []
    loaded = load_model(str(path), LoadOptions("keep", cache_dir=models_cache_dir()), events.append)
    assert any(p.stage == "Converting tiny-Q8_0.gguf" for p in events)
    assert loaded.mlx_path != leftovers[0] and (loaded.mlx_path / "tokenizer.json").is_file()
    assert loaded.dtype == "q8 (group 32)"


def test_non_llama_architecture_is_refused(tmp_path: Path) -> None:
    path = write_other_architecture_gguf(tmp_path / "other.gguf")

    with pytest.raises(ModelLoadError, match="'qwen2'.*only llama"):
        load_model(str(path), LoadOptions(cache_dir=models_cache_dir()))


def test_missing_gguf_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "nowhere.gguf"), LoadOptions(cache_dir=models_cache_dir()))


def test_the_caller_chooses_where_conversions_go(tmp_path: Path) -> None:
    # The engine knows no XDG folder: without one from the app, a GGUF cannot be converted.
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match="no cache folder was given"):
        load_model(str(path))


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelLoadError, match="could not be read as a GGUF"):
        load_model(str(path), LoadOptions(cache_dir=models_cache_dir()))


@pytest.mark.parametrize(
    ("pre", "pieces"),
    [
        ("gpt-2", ["12345", "Ġabc"]),
        ("smollm", ["1", "2", "3", "4", "5", "Ġabc"]),
        ("llama-bpe", ["123", "45", "Ġabc"]),
        ("something-new", ["12345", "Ġabc"]),
    ],
)
def test_pre_tokenizer_follows_llama_cpp(pre: str, pieces: list[str], tiny_model_dir: Path, gguf_dir: Path) -> None:
    path = write_tiny_gguf(tiny_model_dir, gguf_dir / "tiny-F32.gguf", "F32")
    meta = {**read_gguf(path)[1], "tokenizer.ggml.pre": pre}
    split = build_tokenizer(meta).pre_tokenizer.pre_tokenize_str("12345 abc")
    assert [piece for piece, _ in split] == pieces

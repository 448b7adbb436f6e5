"""Rebuilds a Hugging Face tokenizer from a GGUF file's metadata, so mlx-lm can load it with no download."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# llama.cpp token types (gguf.TokenType): control tokens are special, user-defined ones are added but not special.
CONTROL, USER_DEFINED = 3, 4

# The regex llama.cpp (src/llama-vocab.cpp) and Llama 3's tokenizer.json use for the "llama3" pre-tokenizer family.
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizerKind:
    """How a `tokenizer.ggml.pre` family splits text before BPE, following llama.cpp's choices."""

    split: str  # "gpt2": GPT-2 regex; "digits": single digits, then GPT-2 regex; "llama3": LLAMA3_REGEX
    clean_spaces: bool  # llama.cpp's clean_spaces: whether decoding drops spaces before punctuation
    add_bos: bool  # llama.cpp's default when the GGUF has no tokenizer.ggml.add_bos_token
    ignore_merges: bool  # a whole word that is in the vocabulary is one token, merges or not


GPT2 = PreTokenizerKind("gpt2", clean_spaces=True, add_bos=False, ignore_merges=False)
PRE_TOKENIZERS = {
    # llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM group: "\p{N}" first, then the GPT-2 regex.
    **{name: PreTokenizerKind("digits", False, False, False) for name in ("smollm", "command-r")},
    **{name: PreTokenizerKind("digits", True, False, False) for name in ("starcoder", "refact", "codeshell")},
    **{
        name: PreTokenizerKind("llama3", True, True, True)
        for name in ("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral")
    },
}


def pre_tokenizer_kind(meta: dict[str, Any]) -> PreTokenizerKind:
    """The pre-tokenizer family of a GGUF vocabulary; unknown names fall back to plain GPT-2 byte-level."""
    return PRE_TOKENIZERS.get(str(meta.get("tokenizer.ggml.pre", "")), GPT2)


def _add_bos(meta: dict[str, Any]) -> bool:
    """Whether encoding starts with BOS: the GGUF's flag, else llama.cpp's default for the pre-tokenizer."""
    flag = meta.get("tokenizer.ggml.add_bos_token")
    has_bos = meta.get("tokenizer.ggml.bos_token_id") is not None
    return has_bos and (bool(flag) if flag is not None else pre_tokenizer_kind(meta).add_bos)


def build_tokenizer(meta: dict[str, Any]) -> Tokenizer:
    """A byte-level BPE `tokenizers.Tokenizer` from GGUF metadata (tokenizer.ggml.model "gpt2")."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    model_kind = meta.get("tokenizer.ggml.model")
    if model_kind != "gpt2":
        raise ValueError(f"tokenizer model '{model_kind}' is not supported (only the gpt2 byte-level BPE is)")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    kind = pre_tokenizer_kind(meta)

    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    vocab = {token: i for i, token in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=kind.ignore_merges))
    if kind.split == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        digits = [pre_tokenizers.Digits(individual_digits=True)] if kind.split == "digits" else []
        tok.pre_tokenizer = pre_tokenizers.Sequence([*digits, gpt2])
    # mlx-lm picks its fast streaming detokenizer only when the decoder is exactly ByteLevel.
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens(
        [
            AddedToken(t, special=types[i] == CONTROL, normalized=False)
            for i, t in enumerate(tokens)
            if types[i] in (CONTROL, USER_DEFINED)
        ]
    )
    if _add_bos(meta):
        bos = tokens[meta["tokenizer.ggml.bos_token_id"]]
        bos_id = meta["tokenizer.ggml.bos_token_id"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    return tok


def write_tokenizer_files(meta: dict[str, Any], folder: Path) -> None:
    """Writes tokenizer.json and tokenizer_config.json that transformers' PreTrainedTokenizerFast loads."""
    tok = build_tokenizer(meta)
    tok.save(str(folder / "tokenizer.json"))
    tokens = meta["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        token_id = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[token_id] if token_id is not None and token_id < len(tokens) else None

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "unk_token": token("unknown"),
        "pad_token": token("padding"),
        "add_bos_token": _add_bos(meta),
        "add_eos_token": False,
        "clean_up_tokenization_spaces": pre_tokenizer_kind(meta).clean_spaces,
        "model_max_length": meta.get(f"{meta.get('general.architecture')}.context_length", 1 << 30),
    }
    if "tokenizer.chat_template" in meta:
        config["chat_template"] = meta["tokenizer.chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))

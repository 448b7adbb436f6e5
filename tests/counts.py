"""Token counts for the tests' expected values, from outside the code under test: a model folder's chat template and
tokenizer read by transformers itself, or its tokenizer file by the `tokenizers` package (never the app's or the
engine's own counts, whose bugs would then be the reference's too)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def chat_counter(model: Path) -> Callable[..., int]:
    """count(messages, tools=None): the tokens of a chat ready for its reply, as the model's template writes it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))

    def count(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        encoded = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_dict=True)
        return len(encoded["input_ids"])

    return count


def text_tokens(model: Path, text: str) -> int:
    """`text`'s tokens, no special tokens added, by the model's tokenizer file."""
    from tokenizers import Tokenizer

    return len(Tokenizer.from_file(str(model / "tokenizer.json")).encode(text, add_special_tokens=False).ids)

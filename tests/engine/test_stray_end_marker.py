"""A stray end-of-reasoning marker in the answer, as a model writes it again once a reasoning budget closed its
reasoning for it: the engine's split of each tiny reasoning model's reply (tests/tiny_reasoning.py, its tokenizer
as mlx-lm loads it) leaves it out of the answer, whole or arriving in pieces."""

from __future__ import annotations

import pytest

from mlxchat.engine.reply_parts import ReasoningFormat
from tests.tiny_reasoning import MARKERS


@pytest.mark.parametrize("style", ["switch", "channel"])
def test_a_stray_end_marker_in_the_answer_is_not_answer_text(style, reasoning_model) -> None:
    from mlx_lm.utils import load_tokenizer

    tokenizer = load_tokenizer(reasoning_model(style))
    start, end = MARKERS[style]
    split = ReasoningFormat(tokenizer).split(tokenizer.encode("Where is Paris?"), budget=None)
    # (split where a token could: the end marker's text arrives in two pieces the second time)
    texts = [start, "Several", end, " Paris", end, " is", end[:3], end[3:], " the capital."]
    parts = [part for text in texts for part in split.take(text, 0.0)] + split.flush()
    assert "".join(text for part, text in parts if part == "reasoning") == "Several"
    assert "".join(text for part, text in parts if part == "answer") == " Paris is the capital."

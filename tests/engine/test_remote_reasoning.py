"""The remote engine tells reasoning from answer as a real mlx_lm.server on localhost sends them (its
`reasoning` field), serving the tiny scripted reasoning model (tests/tiny_reasoning.py)."""

from __future__ import annotations

from pathlib import Path

from mlxchat.engine.events import SamplingParams, TextDelta
from tests.engine.test_remote import start_engine
from tests.servers import serving_with_mlx_lm
from tests.tiny_reasoning import ANSWER, REASONING

CHAT = [{"role": "user", "content": "Where is Paris?"}]


def test_reasoning_and_answer_come_apart_and_thinking_off_reaches_the_template(reasoning_model, tmp_path: Path) -> None:
    with serving_with_mlx_lm(reasoning_model("switch"), tmp_path) as server:
        engine = start_engine(server.url)
        try:
            events: list = []
            done = engine.submit(0, CHAT, sampling=SamplingParams(max_tokens=64), on_event=events.append).result(60)
            deltas = [e for e in events if isinstance(e, TextDelta)]
            assert done.reason == "stop", done.error
            assert "".join(d.text for d in deltas if d.part == "reasoning") == done.reasoning == REASONING
            assert "".join(d.text for d in deltas if d.part == "answer") == done.text == ANSWER
            assert done.stats.reasoning_tokens > 0

            # Thinking off: the server renders the template with enable_thinking false; the answer alone.
            done = engine.submit(0, CHAT, sampling=SamplingParams(max_tokens=64, thinking=False)).result(60)
            assert done.reasoning == "" and done.text.strip() == ANSWER.strip()
        finally:
            engine.shutdown()

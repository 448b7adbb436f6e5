"""A reply offered no tools: the tiny tool model (tests/tiny_tools.py) still writes its `<tool_call>` text, and that
is answer text, markers and all, not a call that fails to parse."""

from __future__ import annotations

from pathlib import Path

from mlxchat.engine.events import SamplingParams, TextDelta
from tests.started import start_as_the_app
from tests.tiny_tools import CALL

CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_a_call_written_with_no_tools_offered_is_text(tool_model_dir: Path, tmp_path: Path) -> None:
    engine = start_as_the_app(tool_model_dir, tmp_path / "cache", parallel=1)
    try:
        events: list = []
        done = engine.submit(0, CHAT, sampling=SamplingParams(max_tokens=32), on_event=events.append).result(60)
        assert done.reason == "stop" and done.tool_calls == ()
        # The model's tokens, as written (tests/tiny_tools.py's script), every one of them answer text.
        assert done.text == f"<tool_call>{CALL}</tool_call>"
        streamed = [e for e in events if isinstance(e, TextDelta)]
        assert {e.part for e in streamed} == {"answer"} and "".join(e.text for e in streamed) == done.text
    finally:
        engine.shutdown()

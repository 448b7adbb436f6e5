"""The remote engine reads a reply's parts as a real mlx_lm.server on localhost sends them: reasoning apart from
the answer (its `reasoning` field), on the tiny scripted reasoning model (tests/tiny_reasoning.py), and tool calls
(streamed `tool_calls`), on the tiny tool model (tests/tiny_tools.py)."""

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


def test_a_tool_call_streams_from_the_server_and_the_round_goes_on(tool_model_dir: Path, tmp_path: Path) -> None:
    """The same round through the remote engine: the `tools` parameter, the streamed `tool_calls`, the result sent
    back as a tool message, the answer."""
    from tests.engine.test_tool_calls import CHAT as ASKED
    from tests.engine.test_tool_calls import WEATHER
    from tests.tiny_tools import ANSWER as TOOL_ANSWER

    with serving_with_mlx_lm(tool_model_dir, tmp_path) as server:
        engine = start_engine(server.url)
        try:
            done = engine.submit(0, ASKED, tools=[WEATHER], sampling=SamplingParams(max_tokens=32)).result(60)
            assert done.reason == "stop", done.error
            (call,) = done.tool_calls
            assert (call.name, call.arguments, call.error) == ("weather", {"city": "Paris"}, None) and call.id
            calls = [{"id": call.id, "type": "function", "function": {"name": "weather", "arguments": call.arguments}}]
            history = [*ASKED, {"role": "assistant", "content": "", "tool_calls": calls},
                       {"role": "tool", "tool_call_id": call.id, "name": "weather", "content": "18 °C and clear"}]
            again = engine.submit(0, history, tools=[WEATHER], sampling=SamplingParams(max_tokens=32)).result(60)
            assert again.text.strip() == TOOL_ANSWER.strip() and not again.tool_calls
        finally:
            engine.shutdown()

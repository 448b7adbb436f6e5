"""Tool calls read by the real engine with the tokenizer's own parser (mlx-lm's json_tools for the tiny tool model,
tests/tiny_tools.py), and the round that continues on the same slot reading only the new tokens."""

from __future__ import annotations

from pathlib import Path

from mlxchat.engine.events import SamplingParams, TextDelta
from mlxchat.engine.requests import render
from tests.started import start_as_the_app
from tests.tiny_tools import ANSWER

WEATHER = {"type": "function", "function": {"name": "weather", "description": "Today's weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_a_call_ends_the_reply_parsed_and_the_round_goes_on_reading_only_the_result(tool_model_dir: Path,
                                                                                     tmp_path: Path) -> None:
    engine = start_as_the_app(tool_model_dir, tmp_path / "cache", parallel=2)
    try:
        events: list = []
        done = engine.submit(0, CHAT, tools=[WEATHER], sampling=SamplingParams(max_tokens=32),
                             on_event=events.append).result(60)
        assert done.reason == "stop" and done.text == ""
        (call,) = done.tool_calls
        assert (call.name, call.arguments, call.error) == ("weather", {"city": "Paris"}, None) and call.id
        assert {e.part for e in events if isinstance(e, TextDelta)} == {"tool"}
        first_prompt = done.stats.prompt_tokens

        # The result goes back as a tool message; the slot still holds the conversation and the call.
        calls = [{"id": call.id, "type": "function", "function": {"name": "weather", "arguments": call.arguments}}]
        history = [*CHAT, {"role": "assistant", "content": "", "tool_calls": calls},
                   {"role": "tool", "tool_call_id": call.id, "name": "weather", "content": "18 °C and clear"}]
        again = engine.submit(0, history, tools=[WEATHER], sampling=SamplingParams(max_tokens=32)).result(60)
        assert again.text.strip() == ANSWER.strip() and not again.tool_calls
        tokenizer = engine.core.tokenizer
        prompt = render(tokenizer, history, tools=[WEATHER])
        # Read: the result's turn only; cached: the first prompt and the call the model wrote.
        assert again.stats.cached_tokens >= first_prompt + done.stats.generated_tokens - 1
        assert again.stats.prefilled_tokens == len(prompt) - again.stats.cached_tokens < 30
    finally:
        engine.shutdown()


def test_unlisted_tools_are_not_rendered_but_their_calls_are_read(tool_model_dir: Path, tmp_path: Path) -> None:
    """A tool found by a search is defined in the conversation: the template does not list it (the prompt is the
    listed tools' alone), and the reply's call of it is read as any other."""
    search = {"type": "function", "function": {"name": "search_tools", "description": "Searches the tools.",
                                               "parameters": {"type": "object", "properties": {}}}}
    engine = start_as_the_app(tool_model_dir, tmp_path / "cache", parallel=1)
    try:
        done = engine.submit(0, CHAT, tools=[search], unlisted_tools=[WEATHER],
                             sampling=SamplingParams(max_tokens=32)).result(60)
        assert done.stats.prompt_tokens == len(render(engine.core.tokenizer, CHAT, tools=[search]))
        assert done.stats.prompt_tokens < len(render(engine.core.tokenizer, CHAT, tools=[search, WEATHER]))
        (call,) = done.tool_calls
        assert (call.name, call.arguments, call.error) == ("weather", {"city": "Paris"}, None)
    finally:
        engine.shutdown()

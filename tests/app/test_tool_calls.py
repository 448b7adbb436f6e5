"""A reply's tool calls on the app's side: matched to the tools offered, arguments checked against each tool's
schema, results cut with a note, and the one-line summary of a call."""

from __future__ import annotations

from mlxchat.app.tools.calls import cut, plan_calls, record, summary
from mlxchat.app.tools.servers import Tool, ToolResult
from mlxchat.engine import ToolCall

WEATHER = Tool("test", "weather", "Today's weather.", {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]})


def test_calls_are_matched_and_checked_and_each_problem_is_what_the_model_is_told() -> None:
    calls = (
        ToolCall("a", "weather", {"city": "Paris"}),
        ToolCall("b", "weather", {"town": 3}),
        ToolCall("c", "forecast", {}),
        ToolCall("d", "", {"text": "<tool_call>{"}, "cannot read the call: Expecting value"),
    )
    good, wrong, unknown, unread = plan_calls(calls, [WEATHER])
    assert (good.tool, good.problem, good.label) == (WEATHER, None, 'weather(city="Paris")')
    assert wrong.problem == "invalid arguments: 'city' is a required property"
    assert unknown.problem == "there is no tool named 'forecast' (offered: weather)"
    assert unread.tool is None and unread.problem == "cannot read the call: Expecting value"


def test_a_result_is_cut_with_a_note_and_a_call_reads_in_one_line() -> None:
    assert cut("short", 10) == "short"
    text = "x" * 1000
    note = "\n[the result was cut: 1,000 characters, of which the first 20 are shown]"
    assert cut(text, 10, tokens=500) == "x" * 20 + note  # (500 tokens in 1,000 characters: 10 tokens are 20)
    (planned,) = plan_calls((ToolCall("a", "weather", {"city": "Paris"}),), [WEATHER])
    saved = record(planned, ToolResult("18 °C and clear\nwind 5 km/h", ms=340.0), "done")
    assert summary(saved) == '⚙ weather(city="Paris") → 18 °C and clear · 340 ms'
    assert summary(record(planned, ToolResult("boom", error=True), "done")) == '⚙ weather(city="Paris") → ✗ boom'

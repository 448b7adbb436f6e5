"""A tiny model that calls a tool (tests/tiny_scripted.py's table): asked anything, it calls `weather` for Paris in
the format of mlx-lm's json_tools parser (Qwen's `<tool_call>{...}</tool_call>`); after a tool's result, whose turn
the template ends with its own token, it answers from it (unless the result starts with "again": then it calls the
tool again, for the round limit's test). Its twin (build_two_call_model) calls `weather` twice in one round, for
Paris and for Lyon."""

from __future__ import annotations

from pathlib import Path

from tests.tiny_scripted import EOS, build_scripted_model

CALL = '{"name": "weather", "arguments": {"city": "Paris"}}'  # one token: the model writes the call whole
ANSWER = " Paris is clear today."
AFTER_RESULT = "<answer>"  # the generation prompt's last token after a tool's result

# A Qwen-style template: the tools listed in a system turn, calls in <tool_call> (json_tools: the template names
# tool_call.name), results in <tool_response>. The model's call, sent back, is written as the model wrote it.
TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for tool in tools %}{{ tool | tojson }}{% endfor %}</tools>"
    "<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'tool' %}<|im_start|>user\n<tool_response>{{ message.content }}</tool_response>"
    "<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "{% for call in message.tool_calls or [] %}{% set tool_call = call.function %}"
    '<tool_call>{"name": "{{ tool_call.name }}", "arguments": {{ tool_call.arguments | tojson }}}</tool_call>'
    "{% endfor %}" + EOS + "\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    # A result that asks to be called again ends the prompt as a question does: the model calls the tool again.
    "{% if messages[-1].role == 'tool' and not messages[-1].content.startswith('again') %}" + AFTER_RESULT
    + "{% endif %}{% endif %}"
)


def build_tool_model(path: Path) -> Path:
    """Writes the tiny tool-calling model to `path`."""
    return build_scripted_model(
        path, ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", AFTER_RESULT, CALL], TEMPLATE,
        [("\n", ["<tool_call>", CALL, "</tool_call>", EOS]), (AFTER_RESULT, [ANSWER, EOS])],
    )


# The search model (tests/ui/test_tool_search.py): tools deferred behind mlxchat's search_tools, it calls the search
# and `weather` in one round; `weather` is not offered yet (the model is told so) but the search found it, so the
# next round's same calls run it; after its result it answers. (Its table gives each token one successor: a reply
# cannot make different calls in different rounds, so it makes the same two each time.)
SEARCH_THEN_CALL = ('[{"name": "search_tools", "arguments": {"query": "weather"}}, '
                    '{"name": "weather", "arguments": {"city": "Paris"}}]')
NOT_OFFERED = "there is no tool named"  # (the start of what the model is told of a call it cannot make)
SEARCH_TEMPLATE = TEMPLATE.replace(
    "{% for call in message.tool_calls or [] %}{% set tool_call = call.function %}"
    '<tool_call>{"name": "{{ tool_call.name }}", "arguments": {{ tool_call.arguments | tojson }}}</tool_call>'
    "{% endfor %}",
    # The calls sent back as the model wrote them: in one list.
    "{% if message.tool_calls %}<tool_call>[{% for call in message.tool_calls %}{% set tool_call = call.function %}"
    '{"name": "{{ tool_call.name }}", "arguments": {{ tool_call.arguments | tojson }}}{% if not loop.last %}, '
    "{% endif %}{% endfor %}]</tool_call>{% endif %}",
).replace("not messages[-1].content.startswith('again')", f"not messages[-1].content.startswith({NOT_OFFERED!r})")


def build_search_model(path: Path) -> Path:
    """Writes the tiny model that searches for `weather`, then calls it, to `path`."""
    assert SEARCH_TEMPLATE.count(NOT_OFFERED) == 1 and "loop.last" in SEARCH_TEMPLATE
    return build_scripted_model(
        path, ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", AFTER_RESULT, SEARCH_THEN_CALL],
        SEARCH_TEMPLATE,
        [("\n", ["<tool_call>", SEARCH_THEN_CALL, "</tool_call>", EOS]), (AFTER_RESULT, [ANSWER, EOS])],
    )


CALL_LYON = '{"name": "weather", "arguments": {"city": "Lyon"}}'
BETWEEN_CALLS = "</tool_call><tool_call>"  # one token: a script cannot pass through the same token twice


def build_two_call_model(path: Path) -> Path:
    """Writes the tiny model that calls the tool twice in one reply, then answers from both results."""
    return build_scripted_model(
        path, ["<tool_call>", "</tool_call>", BETWEEN_CALLS, "<tool_response>", "</tool_response>", AFTER_RESULT,
               CALL, CALL_LYON], TEMPLATE,
        [("\n", ["<tool_call>", CALL, BETWEEN_CALLS, CALL_LYON, "</tool_call>", EOS]), (AFTER_RESULT, [ANSWER, EOS])],
    )

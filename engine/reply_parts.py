"""Which part of a reply each piece of its text is (reasoning, answer, a tool call), as mlx-lm's text state
machine splits it for the loaded tokenizer, and the tokens that end reasoning when a budget is spent.

No list of tags here: the markers are the tokenizer's (mlx_lm.tokenizer_utils infers them from its vocabulary
and chat-template module); where a reply starts is read from its prompt, as mlx_lm.server reads it.
"""

from __future__ import annotations

import json
from typing import Any

from mlx_lm.generate import TextStateMachine, make_text_state_machine

from mlxchat.engine.requests import render
from mlxchat.engine.events import Part, ToolCall

# mlx-lm's state names, as the events name them.
_PARTS: dict[str | None, Part] = {"normal": "answer", "reasoning": "reasoning", "tool": "tool"}


class ReasoningFormat:
    """A tokenizer's reasoning markers: its state machine, the state a reply starts in, and what ends reasoning."""

    def __init__(self, tokenizer: Any, scan: bool = True) -> None:
        """`scan` False: replies are not split, their text all answer (the bench's reference for the split's cost)."""
        self.tokenizer = tokenizer
        end = _end_marker(tokenizer)
        self.machine = make_text_state_machine(_StrayEnds(tokenizer, end) if end else tokenizer) if scan else None
        # The tokens fed in place of the model's when a budget is spent.
        self.end_tokens = tuple(tokenizer.think_end_tokens) if tokenizer.has_thinking else \
            tuple(tokenizer.encode(end, add_special_tokens=False)) if end else ()

    def initial(self, prompt: list[int]) -> str:
        """The state a reply to `prompt` starts in: reasoning where the template opened it itself (the last
        start marker in the prompt comes after the last end marker)."""
        t = self.tokenizer
        state = "normal"
        if t.has_thinking and t.rfind_think_start(prompt) > t.rfind_think_end(prompt):
            state = "reasoning"
        return t.response_initial_state or state

    def split(self, prompt: list[int], budget: int | None, tools: bool = False) -> ReplySplit:
        """A reply's splitter, for a reply to `prompt` whose reasoning may take `budget` tokens (None: any);
        `tools`: whether it was offered tools (without, a call it writes is answer text, its markers written back)."""
        if self.machine is None:
            return ReplySplit(None, None)
        t = self.tokenizer
        markers = None if tools else (getattr(t, "tool_call_start", None) or "", getattr(t, "tool_call_end", None) or "")
        return ReplySplit(self.machine.make_state(self.initial(prompt)), budget if self.end_tokens else None, markers)


class ReplySplit:
    """One reply's text, split as it streams: its parts, its reasoning tokens and how long it reasoned."""

    def __init__(self, state: Any, budget: int | None, call_markers: tuple[str, str] | None = None) -> None:
        """`call_markers`: where the reply was offered no tools, the markers around a call, to write it as text."""
        self._state = state
        self.budget = budget
        self._call_markers = call_markers
        self.reasoning_tokens = 0
        self.reasoning_text: list[str] = []
        self.tool_texts: list[str] = []  # each tool call's text, between its markers
        self._part: Part | None = None  # the part the last text was in
        self._started: float | None = None  # when the first token of its reasoning came
        self._last = 0.0  # and the last (the one that ended it included)

    @property
    def reasoning(self) -> bool:
        """Whether the reply is in its reasoning now."""
        return self._state is not None and self._state[0] == "reasoning"

    @property
    def spent(self) -> bool:
        """Whether the reply reasons and its budget is spent: its reasoning must end now."""
        return self.reasoning and self.budget is not None and self.reasoning_tokens >= self.budget

    def take(self, text: str, now: float, counted: bool = True) -> list[tuple[Part, str]]:
        """A token's text, as the parts it falls in (markers removed; text that may start one is held
        back). `counted`: whether the token counts towards the reasoning (one the engine forced does not)."""
        if self._state is None:  # (not scanned)
            return [("answer", text)] if text else []
        before = self._state[0]
        self._state, segments = TextStateMachine.split(self._state, text)
        after = self._state[0]
        if counted and before == after == "reasoning":
            self.reasoning_tokens += 1
        if "reasoning" in (before, after):
            self._started = self._started or now
            self._last = now
        return self._parts(segments)

    def flush(self) -> list[tuple[Part, str]]:
        """The text held back, at the reply's end."""
        if self._state is None:
            return []
        self._state, text, state = TextStateMachine.flush(self._state)
        return self._parts([(state, text)])

    def _parts(self, segments: list[tuple[str | None, str]]) -> list[tuple[Part, str]]:
        parts = []
        for state, text in segments:
            part = _PARTS.get(state, "answer")
            shown: Part = part
            if self._call_markers is not None and "tool" in (part, self._part):  # no tools offered: a call is text
                if (part == "tool") != (self._part == "tool"):  # (it starts or ends: its marker)
                    text = self._call_markers[0 if part == "tool" else 1] + text
                shown = "answer" if part == "tool" else part
            elif part == "tool":
                if self._part != "tool":  # (a call starts)
                    self.tool_texts.append("")
                self.tool_texts[-1] += text
            self._part = part
            if text:
                parts.append((shown, text))
        self.reasoning_text.extend(text for part, text in parts if part == "reasoning")
        return parts

    @property
    def reasoning_s(self) -> float:
        """How long the reply reasoned, from its first reasoning token to the one that ended it (or the last)."""
        return self._last - self._started if self._started is not None else 0.0


def _end_marker(tokenizer: Any) -> str | None:
    """The text that closes reasoning; None where the model has no end marker."""
    if tokenizer.has_thinking:
        return str(tokenizer.think_end)
    ends = [text for text, state in tokenizer.response_transitions.get("reasoning", ()) if state == "normal"]
    return ends[0] if ends else None


class _StrayEnds:
    """The tokenizer as mlx-lm's state machine reads it, with its end-of-reasoning marker one of the answer's
    structural markers too: stripped where the model writes it again once its reasoning ended (a model whose
    reasoning a budget cut short goes on closing it: 25 of them were seen in one answer)."""

    def __init__(self, tokenizer: Any, end: str) -> None:
        self._tokenizer = tokenizer
        self.structural_markers = [*(tokenizer.structural_markers or ()), end]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def has_thinking_switch(tokenizer: Any) -> bool:
    """Whether the model marks reasoning and its chat template writes a chat differently with its thinking off."""
    marks = tokenizer.has_thinking or "reasoning" in tokenizer.response_transitions
    return bool(marks) and _template_heeds(tokenizer, thinking=False)


def takes_tools(tokenizer: Any) -> bool:
    """Whether the model's tool calls can be read (mlx-lm knows its parser) and its template lists tools given it."""
    probe = [{"type": "function", "function": {"name": "probe", "description": "", "parameters": {"type": "object"}}}]
    return tokenizer.has_tool_calling and _template_heeds(tokenizer, tools=probe)


def _template_heeds(tokenizer: Any, **kwargs: Any) -> bool:
    """Whether the chat template writes a plain chat differently given `kwargs` (render's) than without; a template
    that cannot render it heeds nothing."""
    chat = [{"role": "user", "content": "Hello"}]
    try:
        return render(tokenizer, chat) != render(tokenizer, chat, **kwargs)
    except Exception:
        return False


def tool_calls(tokenizer: Any, texts: list[str], tools: Any, request_id: int) -> tuple[ToolCall, ...]:
    """The calls in a reply's tool texts, read by the tokenizer's own tool parser (mlx_lm.tool_parsers); a text it
    cannot read is a call with its error (the model is told)."""
    calls: list[ToolCall] = []
    for text in texts:
        try:
            parsed = tokenizer.tool_parser(text, tools)
        except Exception as exc:  # (a call cut short, or not in the template's format)
            error = f"cannot read the call: {exc}"
            calls.append(ToolCall(f"call_{request_id}_{len(calls)}", "", {"text": text}, error))
            continue
        for call in parsed if isinstance(parsed, list) else [parsed]:
            arguments = call.get("arguments", {})
            if isinstance(arguments, str):  # (some parsers leave them as JSON text)
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = {"text": arguments}
            call_id = call.get("id") or f"call_{request_id}_{len(calls)}"
            calls.append(ToolCall(call_id, str(call.get("name", "")), arguments if isinstance(arguments, dict) else {}))
    return tuple(calls)

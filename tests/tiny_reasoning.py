"""Tiny reasoning models whose greedy reply is a known script, in the styles real reasoning models use.

Each is a real llama folder (loaded as any model is) with weights set so that the model is a table: every
layer adds nothing (its output projections are zero), each token's embedding is its own axis, and the
output head maps each token to its successor in the script. The reply to any chat therefore follows the
script from the prompt's last token: the model writes its reasoning between its markers, then its answer,
then its end token. The markers are the tokenizer's own, which mlx-lm infers from its vocabulary.

Styles:
- "switch": `<think>` … `</think>`, with the template's thinking switch (off, the template writes an empty
  block and the reply is the answer alone), as Qwen 3 does;
- "opens": the template opens `<think>` itself, in the prompt, as DeepSeek-R1 distills do: the reply starts
  in its reasoning;
- "channel": a marker of several tokens, `<|channel>thought` … `<channel|>`, as Gemma 4 writes it.

A past reply's `reasoning_content`, where the app sends it (keep_reasoning), is rendered in its markers.
"""

from __future__ import annotations

from pathlib import Path

from tests.tiny_scripted import EOS, build_scripted_model

REASONING = "Several chats at once share one model"
ANSWER = " Paris is the capital of France."
MARKERS = {"switch": ("<think>", "</think>"), "opens": ("<think>", "</think>"),
           "channel": ("<|channel>thought", "<channel|>")}
# The tokens each style adds to the vocabulary (as real models have them: mlx-lm infers the markers from these).
ADDED = {"switch": ["<think>", "</think>"], "opens": ["<think>", "</think>"],
         "channel": ["<|channel>", "<channel|>", "thought"]}


def template(style: str) -> str:
    start, end = MARKERS[style]
    past = f"{{% if message.reasoning_content %}}{start}{{{{ message.reasoning_content }}}}{end}{{% endif %}}"
    if style == "switch":
        opening = f"{{% if enable_thinking is defined and not enable_thinking %}}{start}{end}{{% endif %}}"
    else:
        opening = f"{start}\n" if style == "opens" else ""
    return (
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\n' }}"
        f"{{% if message['role'] == 'assistant' %}}{past}{{% endif %}}"
        f"{{{{ message['content'] + '{EOS}' + '\n' }}}}"
        "{% endfor %}"
        f"{{% if add_generation_prompt %}}{{{{ '<|im_start|>assistant\n' }}}}{opening}{{% endif %}}"
    )


def script(style: str) -> list[str]:
    """The reply's pieces as the model writes them (each encoded separately): its opening marker unless the
    template writes it, its reasoning, its closing marker, its answer and its end token."""
    start, end = MARKERS[style]
    return ([] if style == "opens" else [start]) + [REASONING, end, ANSWER, EOS]


def build_reasoning_model(path: Path, style: str) -> Path:
    """Writes the tiny `style` reasoning model to `path`."""
    last = "\n" if style != "opens" else f"{MARKERS[style][0]}\n"  # the prompt's last token is its successor's
    # Thinking off, the prompt ends with the empty block's end marker: one token, on the script before the answer.
    return build_scripted_model(path, ADDED[style], template(style), [(last, script(style))])


def reply_tokens(path: Path, part: str) -> int:
    """How many tokens the script's `part` ("reasoning" or "answer") is, in the model at `path`."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    return len(tok.encode(REASONING if part == "reasoning" else ANSWER, add_special_tokens=False).ids)

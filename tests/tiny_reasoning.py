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

from tests.tiny_model import CONFIG, build_tokenizer, write_tokenizer

REASONING = "Several chats at once share one model"
ANSWER = " Paris is the capital of France."
EOS = "<|im_end|>"
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
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama
    from tokenizers import AddedToken

    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(ascii_only=True)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED[style]])
    vocab = tok.get_vocab_size()
    width = -(-vocab // 64) * 64  # each token its own axis of the hidden state
    eos = tok.token_to_id(EOS)
    config = dict(CONFIG, vocab_size=vocab, hidden_size=width, intermediate_size=64, eos_token_id=eos)
    write_tokenizer(path, tok, config, template(style))

    # The chain of tokens the model follows: the prompt's last token (the template's), then the script.
    last = _ids(tok, "\n" if style != "opens" else f"{MARKERS[style][0]}\n")[-1:]
    chain = last + [i for piece in script(style) for i in _ids(tok, piece)]
    # Thinking off, the prompt ends with the empty block's end marker, one token, whose successor is the answer.
    assert style != "switch" or len(_ids(tok, MARKERS[style][1])) == 1
    assert len(set(chain)) == len(chain), f"the {style} script repeats a token: {tok.decode(chain)}"
    model = llama.Model(llama.ModelArgs.from_dict(config))
    params = {k: mx.zeros_like(v) if v.ndim == 2 else v for k, v in tree_flatten(model.parameters())}
    params["model.embed_tokens.weight"] = mx.eye(vocab, width)
    head = mx.zeros((vocab, width))
    following = mx.full((vocab,), eos)  # a token off the script ends the reply
    following[mx.array(chain[:-1])] = mx.array(chain[1:])
    head[following, mx.arange(vocab)] = 4.0
    params["lm_head.weight"] = head
    mx.save_safetensors(str(path / "model.safetensors"), params)
    return path


def reply_tokens(path: Path, part: str) -> int:
    """How many tokens the script's `part` ("reasoning" or "answer") is, in the model at `path`."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    return len(tok.encode(REASONING if part == "reasoning" else ANSWER, add_special_tokens=False).ids)


def _ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids

"""Tiny models whose greedy reply is a known script: a real llama folder, loaded as any model is, whose weights
make it a table. Every layer adds nothing (its output projections are zero), each token's embedding is its own axis
of the hidden state, and the output head maps each token to its successor in a script. The reply to a chat then
follows the script from the prompt's last token, which the chat template writes: a template that ends differently
after different turns (after a tool's result, say) starts another script.
"""

from __future__ import annotations

from pathlib import Path

from tests.tiny_model import CONFIG, build_tokenizer, write_tokenizer

EOS = "<|im_end|>"


def build_scripted_model(path: Path, added: list[str], template: str, scripts: list[tuple[str, list[str]]]) -> Path:
    """Writes the model to `path`: the tiny ASCII tokenizer with the `added` tokens, the chat `template`, and for
    each (prompt end, pieces) of `scripts` a chain from the last token of the prompt's end through the pieces'
    tokens (each piece encoded on its own). No token may follow two others: the scripts must not repeat one."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama
    from tokenizers import AddedToken

    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(ascii_only=True)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    vocab = tok.get_vocab_size()
    width = -(-vocab // 64) * 64  # each token its own axis of the hidden state
    eos = tok.token_to_id(EOS)
    config = dict(CONFIG, vocab_size=vocab, hidden_size=width, intermediate_size=64, eos_token_id=eos)
    write_tokenizer(path, tok, config, template)

    following = mx.full((vocab,), eos)  # a token off the scripts ends the reply
    seen: set[int] = set()
    for end, pieces in scripts:
        chain = ids(tok, end)[-1:] + [i for piece in pieces for i in ids(tok, piece)]
        steps = chain[:-1]
        assert not seen & set(steps) and len(set(steps)) == len(steps), f"a script repeats a token: {tok.decode(chain)}"
        seen.update(steps)
        following[mx.array(steps)] = mx.array(chain[1:])
    model = llama.Model(llama.ModelArgs.from_dict(config))
    params = {k: mx.zeros_like(v) if v.ndim == 2 else v for k, v in tree_flatten(model.parameters())}
    params["model.embed_tokens.weight"] = mx.eye(vocab, width)
    head = mx.zeros((vocab, width))
    head[following, mx.arange(vocab)] = 4.0
    params["lm_head.weight"] = head
    mx.save_safetensors(str(path / "model.safetensors"), params)
    return path


def ids(tok, text: str) -> list[int]:
    """`text`'s token ids, with no special tokens added."""
    return tok.encode(text, add_special_tokens=False).ids

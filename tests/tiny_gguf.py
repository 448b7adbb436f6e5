"""Writes a llama GGUF file from a tiny MLX model folder, the way llama.cpp's converter lays it out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# mlx-lm llama module names -> llama.cpp tensor names (per layer, then global).
LAYER_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
GLOBAL_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7}


def gguf_name(mlx_name: str) -> str:
    """The llama.cpp name of an mlx-lm llama weight, e.g. model.layers.0.mlp.up_proj.weight -> blk.0.ffn_up.weight."""
    module, leaf = mlx_name.rsplit(".", 1)
    if module in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[module]}.{leaf}"
    _, _, layer, rest = module.split(".", 3)
    return f"blk.{layer}.{LAYER_NAMES[rest]}.{leaf}"


def permute_for_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's row permutation of q/k projections (convert_hf_to_gguf's LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(mlx_folder: Path, out_path: Path, qtype: str) -> Path:
    """Writes `mlx_folder` (a float llama folder) as a GGUF whose 2-D weights are stored as `qtype`.

    qtype is one of F32, F16, Q8_0, Q4_0, Q4_1. Norms stay F32 as llama.cpp keeps 1-D tensors.
    A folder without lm_head.weight gives a GGUF without an `output` tensor (tied embeddings).
    """
    import gguf
    import mlx.core as mx

    config = json.loads((mlx_folder / "config.json").read_text())
    tok_json = json.loads((mlx_folder / "tokenizer.json").read_text())
    tok_config = json.loads((mlx_folder / "tokenizer_config.json").read_text())
    weights = mx.load(str(mlx_folder / "model.safetensors"))
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config["hidden_size"] // n_head

    writer = gguf.GGUFWriter(str(out_path), "llama")
    writer.add_name(mlx_folder.name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(FILE_TYPES[qtype])

    vocab = tok_json["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.__getitem__)
    special = {t["content"] for t in tok_json["added_tokens"] if t["special"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok_json["model"]["merges"]])
    for key, add in (("eos_token", writer.add_eos_token_id), ("pad_token", writer.add_pad_token_id),
                     ("unk_token", writer.add_unk_token_id), ("bos_token", writer.add_bos_token_id)):
        if tok_config.get(key):
            add(vocab[tok_config[key]])
    writer.add_add_bos_token(False)
    writer.add_chat_template(tok_config["chat_template"])

    ggml_type = gguf.GGMLQuantizationType[qtype]
    for name, value in weights.items():
        w = np.array(value.astype(mx.float32))
        if name.endswith("q_proj.weight"):
            w = permute_for_rope(w, n_head)
        elif name.endswith("k_proj.weight"):
            w = permute_for_rope(w, n_kv)
        if w.ndim == 1 or qtype == "F32":
            writer.add_tensor(gguf_name(name), w)
        elif qtype == "F16":
            writer.add_tensor(gguf_name(name), w.astype(np.float16))
        else:
            writer.add_tensor(gguf_name(name), gguf.quants.quantize(w, ggml_type), raw_dtype=ggml_type)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path


def write_other_architecture_gguf(out_path: Path, architecture: str = "qwen2") -> Path:
    """A one-tensor GGUF of another architecture than llama, which the import refuses."""
    import gguf

    writer = gguf.GGUFWriter(str(out_path), architecture)
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path

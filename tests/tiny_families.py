"""Tiny random-weight models of every family the engine claims, built from config dicts with mlx-lm's classes.

Windows are 8 tokens so the test prompts run past them; weights are float32 and scaled up a
little so greedy paths are peaked and differ by prompt (as tests/tiny_model.py does).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

VOCAB = 384  # the size of tests/tiny_model.py's tokenizer, so saved folders can chat
WINDOW = 8

_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": VOCAB,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}

FAMILIES: dict[str, dict[str, Any]] = {
    "llama": _LLAMA,
    "llama3_rope": dict(
        _LLAMA,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
    "llama_layer_types": dict(
        _LLAMA,
        num_hidden_layers=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        sliding_window=WINDOW,
    ),
    "qwen3": dict(_LLAMA, model_type="qwen3", head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True),
    "phi3_longrope": dict(
        _LLAMA,
        model_type="phi3",
        original_max_position_embeddings=32,
        rope_scaling={"type": "longrope", "short_factor": [1.0 + i / 8 for i in range(8)], "long_factor": [1.0 + i / 4 for i in range(8)]},
    ),
    "gemma2": {
        "model_type": "gemma2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB,
        "query_pre_attn_scalar": 16.0,
    },
    "gemma3_text": {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": VOCAB,
        "query_pre_attn_scalar": 16,
        "sliding_window": WINDOW,
        "sliding_window_pattern": 2,
    },
    # Gemma 4's last layers share the K/V of earlier ones (num_kv_shared_layers).
    "gemma4_text": {
        "model_type": "gemma4_text",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "head_dim": 16,
        "global_head_dim": 16,
        "num_key_value_heads": 2,
        "num_kv_shared_layers": 2,
        "hidden_size_per_layer_input": 16,
        "vocab_size": VOCAB,
        "vocab_size_per_layer_input": VOCAB,
        "sliding_window": WINDOW,
        "sliding_window_pattern": 2,
        "use_double_wide_mlp": False,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    },
    "cohere2": {
        "model_type": "cohere2",
        "hidden_size": 64,
        "head_dim": 16,
        "num_hidden_layers": 4,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": VOCAB,
        "sliding_window": WINDOW,
        "sliding_window_pattern": 2,
    },
    "gpt_oss": {
        "model_type": "gpt_oss",
        "num_hidden_layers": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 64,
        "head_dim": 16,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "sliding_window": WINDOW,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "deepseek_v3": {
        "model_type": "deepseek_v3",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_shared_experts": 1,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "kv_lora_rank": 16,
        "q_lora_rank": None,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "qk_nope_head_dim": 16,
        "first_k_dense_replace": 1,
    },
    "mixtral": {
        "model_type": "mixtral",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
    },
    "qwen3_next": {
        "model_type": "qwen3_next",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "shared_expert_intermediate_size": 32,
        "mlp_only_layers": [],
        "moe_intermediate_size": 32,
        "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB,
        "num_key_value_heads": 2,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "max_position_embeddings": 4096,
        "head_dim": 16,
        "full_attention_interval": 2,
    },
    "lfm2": {
        "model_type": "lfm2",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "norm_eps": 1e-5,
        "conv_bias": False,
        "conv_L_cache": 3,
        "block_dim": 64,
        "block_multiple_of": 16,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "block_ff_dim": 96,
        "full_attn_idxs": [1, 3],
    },
    # Falcon-H1: every layer a CacheList of a Mamba 2 state and a K/V cache.
    "falcon_h1": {
        "model_type": "falcon_h1",
        "head_dim": 16,
        "hidden_size": 64,
        "intermediate_size": 96,
        "mamba_chunk_size": 16,
        "mamba_d_conv": 4,
        "mamba_d_head": 16,
        "mamba_d_ssm": 128,
        "mamba_d_state": 16,
        "mamba_n_heads": 8,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "vocab_size": VOCAB,
        "rope_theta": 10000.0,
    },
    "mamba2": {
        "model_type": "mamba2",
        "num_heads": 8,
        "head_dim": 16,
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "state_size": 16,
        "num_hidden_layers": 2,
        "layer_norm_epsilon": 1e-5,
        "conv_kernel": 4,
        "n_groups": 1,
        "use_bias": False,
        "use_conv_bias": True,
        "tie_word_embeddings": True,
        "time_step_limit": [0.0, float("inf")],
        "time_step_rank": 8,
    },
}


# A family the engine refuses: Llama 4's chunked attention (ChunkedKVCache) has no slot store.
LLAMA4 = {
    "model_type": "llama4",
    "text_config": {
        "attention_bias": False,
        "attention_chunk_size": 8,
        "head_dim": 16,
        "hidden_size": 64,
        "interleave_moe_layer_step": 2,
        "intermediate_size": 64,
        "intermediate_size_mlp": 96,
        "max_position_embeddings": 4096,
        "model_type": "llama4_text",
        "num_attention_heads": 4,
        "num_experts_per_tok": 1,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "num_local_experts": 2,
        "rms_norm_eps": 1e-5,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "use_qk_norm": True,
        "vocab_size": VOCAB,
    },
}


def build_family(name: str, seed: int = 0, scale: float = 1.0, **overrides: Any) -> Any:
    """mlx-lm's model of family `name` (or a config dict) with seeded random float32 weights, evaluated here."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    config = dict(FAMILIES[name], **overrides) if isinstance(name, str) else name
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    params = [(k, v * scale if v.ndim == 2 else v) for k, v in tree_flatten(model.parameters())]
    model.update(tree_unflatten(params))
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    return model


def save_family(name: str | dict, path: Path, **overrides: Any) -> Path:
    """An MLX model folder of family `name` (config, random weights, tests/tiny_model.py's tokenizer)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from tests.tiny_model import build_tokenizer, write_tokenizer

    config = dict(FAMILIES[name], **overrides) if isinstance(name, str) else name
    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(VOCAB)
    write_tokenizer(path, tok, dict(config, eos_token_id=tok.token_to_id("<|im_end|>")))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(build_family(config).parameters())))
    return path

"""What the family matrix (tests/engine/test_family_matrix.py) expects of every model module of the installed
mlx-lm, in one place: it matches mlx-lm alone, it is refused at load (and why), or it cannot be made tiny (and why).

A module whose outcome changes fails the matrix, named: a family that matched and is now refused is a regression,
one that was refused and now loads, or a new module of mlx-lm, is news to write down here. Those that match are
the engine's own list, TESTED_FAMILIES (mlxchat.engine.loading.families), which `mlxchat models` shows.
With mlx-lm 0.32.2: 126 modules, 101 made tiny, 94 match, 7 refused at load, 25 not made tiny.
"""

from __future__ import annotations

# Family -> words its refusal at load must hold.
REFUSED_AT_LOAD: dict[str, str] = {
    "afm7": "its layers use their cache in a way the slots cannot serve",
    "deepseek_v32": "its layers use their cache in a way the slots cannot serve",
    "deepseek_v41": "layer 0: layer cache LayerCache is not one the engine can divide into slots",
    "glm_moe_dsa": "its layers use their cache in a way the slots cannot serve",
    "gpt_bigcode": "its layers use their cache in a way the slots cannot serve",
    "mistral4": "its layers use their cache in a way the slots cannot serve",
    "plamo3": "its sliding-window layers attend over one token more than their cache's window holds",
}

# Module -> words of why tests/tiny_configs.py cannot make it tiny.
NOT_TINY: dict[str, str] = {
    "bitnet": "its model does not build: RuntimeError: [metal_kernel] No Metal",
    "dbrx": "its model does not build: KeyError: 'ffn_hidden_size'",
    "exaone4": "its model does not build: TypeError: object of type 'int' has no len()",
    "exaone_moe": "required argument 'is_moe_layer' (List) has no default and no rule",
    "gemma3n": "required argument 'activation_sparsity_pattern' (List) has no default",
    "granitemoehybrid": "its model does not build: TypeError: unsupported operand type(s) for",
    "hunyuan": "its model does not build: TypeError: 'NoneType' object is not",
    "kimi_k3": "its model does not build: TypeError: 'NoneType' object is not",
    "kimi_linear": "its model does not build: KeyError: 'kda_layers'",
    "llama4": "its model does not build: AssertionError: Only 1 expert per token",
    "llama4_text": "its model does not build: IndexError: list index out of range",
    "longcat_flash": "required argument 'attention_method' (str) has no default and no rule",
    "longcat_flash_ngram": "required argument 'zero_expert_num' (int) has no default and no rule",
    "mellum": "its model does not build: KeyError: 'full_attention'",
    "mimo_v2_flash": "required argument 'partial_rotary_factor' (int) has no default and no",
    "minicpm3": "its model does not build: AttributeError: 'NoneType' object has no",
    "minimax_m3_vl": "its model does not build: TypeError: 'int' object is not subscriptable",
    "muse_spark": "required argument 'moe_hidden_size' (int) has no default and no rule",
    "nemotron-nas": "its model does not build: ValueError: Number of block_configs (0)",
    "nemotron_h": "transformers refuses the generated config: ValueError:",
    "olmo": "it does not import: SystemExit: 1",
    "openelm": "required argument 'ffn_dim_divisor' (int) has no default and no rule",
    "phi3small": "mlx-lm's own forward corrupts the heap on MLX's CPU build (glibc:",
    "prism_hadamard_qwen35": "its model does not build: ValueError: Unsupported Hadamard pack:",
    "spark2_5": "its model does not build: ValueError: Missing RoPE parameters for",
}

# Families whose layers cannot give back a slot's latest tokens (windows shorter than the test's slots, recurrent
# state): they draft nothing (tests/engine/test_speculation_families.py).
NO_SPECULATION: set[str] = {
    "afmoe",
    "baichuan_m1",
    "bailing_hybrid",
    "bailing_moe_linear",
    "bailing_moe_v3",
    "cohere2",
    "falcon_h1",
    "gear",
    "gemma3",
    "gemma3_text",
    "gemma4",
    "gemma4_text",
    "gpt_oss",
    "iquestloopcoder",
    "jamba",
    "lfm2",
    "lfm2-vl",
    "lfm2_moe",
    "mamba",
    "mamba2",
    "muse_glimmer",
    "olmo3",
    "olmo_hybrid",
    "plamo2",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_next",
    "recurrent_gemma",
    "rwkv7",
    "step3p5",
}

# Families whose tiny model's greedy replies to that test's prompts repeat no run of their context: nothing to draft.
NO_REPEAT: set[str] = {"granite"}

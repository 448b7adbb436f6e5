"""Which model families this build runs, how each layer kind is cached per slot, and the refusal for the rest."""

from __future__ import annotations

from typing import Any

from mlxchat.engine.kv.kinds import KIND_NOTES, UnsupportedCache, cache_kind

# Families checked token for token against mlx-lm alone, loaded and run as the app runs them, in
# tests/engine/test_family_matrix.py (configs generated for every mlx-lm module; with mlx-lm 0.32.2, these
# 94 match). Any other family whose layers are of the kinds above loads too, once the check at load
# (engine.loading.batch_check) finds its batched output equal to the model alone.
TESTED_FAMILIES = (
    "Klear", "afmoe", "apertus", "baichuan_m1", "bailing_hybrid", "bailing_moe", "bailing_moe_linear",
    "bailing_moe_v3", "cohere", "cohere2", "deepseek", "deepseek_v2", "deepseek_v3", "dots1", "ernie4_5",
    "ernie4_5_moe", "exaone", "falcon_h1", "gear", "gemma", "gemma2", "gemma3", "gemma3_text", "gemma4",
    "gemma4_text", "glm", "glm4", "glm4_moe", "glm4_moe_lite", "gpt2", "gpt_neox", "gpt_oss", "gptj", "granite",
    "granitemoe", "helium", "hunyuan_v1_dense", "internlm2", "internlm3", "iquestloopcoder", "jamba",
    "kimi_k25", "kimi_vl", "laguna", "lfm2", "lfm2-vl", "lfm2_moe", "lille-130m", "llama", "mamba", "mamba2",
    "mimo", "minicpm", "minimax", "ministral3", "mistral3", "mixtral", "muse_glimmer", "nanbeige", "nanochat",
    "nemotron", "olmo2", "olmo3", "olmo_hybrid", "olmoe", "phi", "phi3", "phimoe", "phixtral", "pixtral",
    "plamo", "plamo2", "qwen", "qwen2", "qwen2_moe", "qwen2_vl", "qwen3", "qwen3_5", "qwen3_5_moe", "qwen3_moe",
    "qwen3_next", "qwen3_vl", "qwen3_vl_moe", "recurrent_gemma", "rwkv7", "seed_oss", "smollm3", "solar_open",
    "stablelm", "starcoder2", "step3p5", "talkie", "telechat3", "youtu_llm",
)


# Families whose layers are all of kinds the slots hold, but that the engine cannot run exactly:
# refused at load with the reason (tests/engine/test_family_matrix.py checks each is refused).
REFUSED_FAMILIES: dict[str, str] = {
    # Its window layers' mask spans window + 1 tokens while mlx-lm's ring holds the window: what a
    # slot's ring gives differs from mlx-lm alone once a chat is past the window.
    "plamo3": "its sliding-window layers attend over one token more than their cache's window holds",
}


class UnsupportedFamily(Exception):
    """The engine cannot run this model; the message names its type and what is missing."""


def model_type(model: Any) -> str:
    args = getattr(model, "args", None)
    return getattr(args, "model_type", None) or type(model).__module__.rsplit(".", 1)[-1]


def layer_kinds(model: Any) -> list[str]:
    """The mlx-lm cache class of each layer (what `model.make_cache()` gives); raises UnsupportedFamily."""
    refused = REFUSED_FAMILIES.get(model_type(model))
    if refused:
        raise UnsupportedFamily(f"model type '{model_type(model)}' is not supported by mlxchat's engine: {refused}")
    try:
        cache = model.make_cache() if hasattr(model, "make_cache") else None
    except Exception as exc:  # a model that cannot even say what it caches cannot be run here
        raise UnsupportedFamily(f"model type '{model_type(model)}': its make_cache() failed ({exc})") from exc
    if cache is None:
        return ["KVCache"] * len(model.layers)
    kinds = []
    for i, proto in enumerate(cache):
        try:
            kinds.append(cache_kind(proto))
        except UnsupportedCache as exc:
            raise UnsupportedFamily(
                f"model type '{model_type(model)}' is not supported by mlxchat's engine: layer {i}: {exc}. "
                f"It supports these layer kinds: {', '.join(KIND_NOTES)}."
            ) from exc
    return kinds


def describe() -> list[str]:
    """Lines for `mlxchat models`: each layer kind and how a slot holds it, then the tested families."""
    lines = ["Layer kinds (mlx-lm cache classes) and how each slot holds them:"]
    lines += [f"  {name:<16} {note}" for name, note in KIND_NOTES.items()]
    lines.append("Families checked token for token against mlx-lm alone: " + ", ".join(TESTED_FAMILIES) + ".")
    lines.append(
        "Any other mlx-lm family whose layers are all of these kinds runs too, once a check at load has "
        "found its batched output equal to the model alone; one that differs, or asks for another kind, "
        "is refused when it loads, naming what is missing."
    )
    from mlxchat.engine.loading.vision import REFUSED_VISION, SEEING_FAMILIES

    lines.append("Families that see images (through mlx-vlm), checked token for token against mlx-vlm alone: "
                 + ", ".join(SEEING_FAMILIES) + ". Refused with images: "
                 + "; ".join(f"{names} ({why})" for names, why in REFUSED_VISION.items()) + ".")
    return lines

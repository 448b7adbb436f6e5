"""What tests/engine/test_vision_outcomes.py expects of every vision-language module of the installed mlx-vlm (the
rule: tests/vlm_modules.py), in one place: it sees in the batched slots, it is refused images at load (and why), or
it is not made tiny (and why).

Those that see are the engine's SEEING_FAMILIES (mlxchat.engine.loading.vision), which `mlxchat models` and F3 name;
tests/engine/test_vision.py checks each in busy slots against mlx-vlm alone, token for token, and each refused one's
words at load. A module not made tiny is so for the words listed here, checked by a generic attempt at a tiny model
(tests/vlm_modules.py): the failure's words where it fails; where its model builds from a generated config, what it
still lacks (NO_SPEC) or why it is not a chat model. A module whose outcome changes, or a new module of mlx-vlm,
fails the test, named.
With mlx-vlm 0.7.10: 94 modules; 19 see, 6 refused at load, 69 not made tiny (19 not chat models, 42 whose generated
model does not build or is not tiny, 8 whose model builds and lacks a tiny processor).
"""

from __future__ import annotations

# Module -> words its refusal at load must hold (its tiny model: tests/vlm_specs.py; checked in test_vision).
REFUSED_AT_LOAD: dict[str, str] = {
    "llava": "mlx-vlm's processor fails on an image here",
    "qwen3_5": "its recurrent layers use mlx-vlm's own cache",
    "qwen3_5_moe": "its recurrent layers use mlx-vlm's own cache",
    "mistral_large3": "mlx-vlm finds no processor for it and loads its tokenizer alone",
    "llava_next": "embeddings do not line up one for one with the processor's tokens",
    "granite_vision": "embeddings do not line up one for one with the processor's tokens",
}

# Variants of families that see, refused at load for a setting of their config (the tiny model's name -> words).
REFUSED_VARIANTS: dict[str, str] = {
    "ministral3": "scales attention by the position of a pass's first row for every row",
    "gemma4_bidirectional": "attends both ways among an image's tokens",
}

# What a module whose model builds from a generated config lacks before the app can chat with it.
NO_SPEC = "its model builds from a generated config; no tiny tokenizer, chat template and processor are written"
_EMBEDS = "not a chat model: an embedding or reranking model (it scores, it does not write)"
_DECIDES = "not a chat model: it answers through a decision head (a choice, a score, yes or no)"
_LOCATES = "not a chat model: it segments, locates or reconstructs what is in an image"
_DIFFUSES = "not a chat model: a diffusion language model (it does not write left to right)"
_ENCODES = "not a chat model: an encoder-decoder (captions, OCR) whose decoder reads the image by cross-attention"
NOT_CHAT = (_EMBEDS, _DECIDES, _LOCATES, _DIFFUSES, _ENCODES)

# Module -> why it is not made tiny.
NOT_TINY: dict[str, str] = {
    "clef": _DECIDES,
    "cohere_compass": _EMBEDS,
    "colidefics3": _EMBEDS,
    "colqwen2_5": _EMBEDS,
    "d1": _DECIDES,
    "d1_omni": _DECIDES,
    "deepseek_vl_v2": "required argument 'projector_config' (ProjectorConfig) has no default",
    "deepseekocr": "required argument 'projector_config' (ProjectorConfig) has no default",
    "deepseekocr_2": "its model does not build: AttributeError: 'int' object has no attribute",
    "diffusion_gemma": _DIFFUSES,
    "dots_ocr": NO_SPEC + ": its processor writes the real tokenizer's image id (151665) whatever the tokenizer",
    "embedding_gemma2": _EMBEDS,
    "ernie4_5_moe_vl": "its generated model is not tiny: resampler_model.temporal_linear.layers.0.weight",
    "falcon_ocr": NO_SPEC,
    "falcon_perception": _LOCATES,
    "fastvlm": "its generated model is not tiny: vision_tower.vision_model.network.10.0.convffn.fc1.weight",
    "florence2": _ENCODES,
    "gemma3n": "'vocab_offset' stays at 262144: no rule says what size it is",
    "gemma4_unified": "'mm_embed_dim' stays at 3840: no rule says what size it is",
    "glm4v_moe": "its model does not build: TypeError: 'NoneType' object is not",
    "glm5_next": "its model does not build: ValueError: `num_attention_heads` must equal",
    "got": "its generated model is not tiny: vision_tower.net_3.weight",
    "granite4_vision": "its model does not build: ZeroDivisionError: integer division or modulo",
    "hunyuan_vl": "'org_vocab_size' stays at 120818: no rule says what size it is",
    "idefics2": "required argument 'perceiver_config' (PerceiverConfig) has no default",
    "indic_ocr": NO_SPEC,
    "inkling": "it does not import: ModuleNotFoundError: No module named 'mlx_audio'",
    "internvl_chat": "its model does not build: ValueError: Unsupported model type",
    "jina_vlm": "'output_size' stays at 2048: no rule says what size it is",
    "kimi_k3": "'vt_intermediate_size' stays at 4096: no rule says what size it is",
    "llama4": "required argument 'num_channels' (int) has no default and no rule says",
    "llama_nemotron_vl_embedding": _EMBEDS,
    "llava_bunny": "required argument 'hidden_size' (int) has no default and no rule says",
    "llmjpvl": NO_SPEC,
    "locateanything": _LOCATES,
    "mage_vl": "'text_hidden_size' stays at 2560: no rule says what size it is",
    "mimo_v2": "its model does not build: TypeError: 'int' object is not",
    "minicpmo": "its model does not build: TypeError: TextConfig.__init__() missing 11",
    "minicpmv4_6": "its model does not build: TypeError: TextConfig.__init__() missing 9",
    "minicpmv4_7": "its model does not build: TypeError: TextConfig.__init__() missing 9",
    "minimax_m3_vl": "'dense_intermediate_size' stays at 12288: no rule says what size it is",
    "mllama": "'vision_output_dim' stays at 7680: no rule says what size it is",
    "molmo": "'mlp_hidden_size' stays at 37888: no rule says what size it is",
    "molmo2": "its generated model is not tiny: vision_tower.image_projector.w2.weight",
    "molmo_point": "its model does not build: AttributeError: 'NoneType' object has no",
    "moondream2": "'proj_inner_dim' stays at 8192: no rule says what size it is",
    "moondream3": "'proj_inner_dim' stays at 8192: no rule says what size it is",
    "multi_modality": "it does not import: ModuleNotFoundError: No module named 'cv2'",
    "muse_glimmer": "its generated model is not tiny: vision_adapter.fc1.weight",
    "muse_spark": "required argument 'layer_types' (list) has no default and no rule says",
    "nemotron_h_nano_omni": "its model does not build: TypeError: ModelConfig.__init__() missing 19",
    "nemotron_parse": _ENCODES,
    "paligemma": NO_SPEC + ": PaliGemma takes a task prefix, not a chat (the real ones ship no chat template)",
    "phi3_v": "its model does not build: TypeError: unsupported operand type(s) for *",
    "phi4_siglip": NO_SPEC,
    "phi4mm": "its generated model is not tiny: language_model.model.embed_tokens.weight",
    "plamo2vl": "'image_feature_size' stays at 1152: no rule says what size it is",
    "prism_hadamard_qwen35": "its model does not build: ValueError: Hadamard packs require 2-bit",
    "qwen3_vl_embedding": _EMBEDS,
    "qwen4_exp": "'indexer_budget' stays at 2048: no rule says what size it is",
    "sam3": _LOCATES,
    "sam3_1": _LOCATES,
    "sam3d_body": _LOCATES,
    "sam3d_objects": _LOCATES,
    "siglip": _EMBEDS,
    "step3p7": NO_SPEC,
    "unlimited_ocr": "required argument 'projector_config' (ProjectorConfig) has no default",
    "youtu_vl": "'num_patches' stays at 4096: no rule says what size it is",
    "zaya1_vl": NO_SPEC,
}

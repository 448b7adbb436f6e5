"""The tiny vision-language models' families, one spec each: the config (mlx-vlm's, with tiny sizes), the tokens a
byte-level tokenizer adds (the family's image markers, turn markers), the chat template (cut to what the tests send:
text and image parts), and the processor's and image processor's configurations. tests/tiny_vlms.py writes a model
folder from one. Images are a few pixels on a side, so the vision towers are cheap.
"""

from __future__ import annotations

from typing import Any

VOCAB = 384
_TEXT = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 4096}
_SIGLIP = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1,
           "num_attention_heads": 2, "patch_size": 7, "image_size": 28}
_NORM = {"do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_rescale": True,
         "rescale_factor": 1 / 255, "do_resize": True, "do_convert_rgb": True, "resample": 2}

# Gemma's template, cut to what the tests send: text and image parts, a system prompt folded into the first turn.
_GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

# Gemma 4's: <|turn> ... <turn|> turns, `<|image|>` where an image goes (the processor writes its tokens there).
_GEMMA4_TEMPLATE = (
    _GEMMA_TEMPLATE.replace("<start_of_turn>", "<|turn>").replace("<end_of_turn>", "<turn|>")
    .replace("<start_of_image>", "<|image|>")
)

# Llava's: USER / ASSISTANT turns, `<image>` where an image goes.
_LLAVA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'].upper() + ': ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>\n' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '</s>' if message['role'] == 'assistant' else '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

# Mistral's (Small 3.x): [INST] turns, `[IMG]` where an image goes (the processor writes its rows of tokens there).
_MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '[SYSTEM_PROMPT]' if message['role'] == 'system' else '' if message['role'] == 'assistant' else '[INST]' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '[IMG]' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '[/SYSTEM_PROMPT]' if message['role'] == 'system' else '</s>' if message['role'] == 'assistant' "
    "else '[/INST]' }}"
    "{% endfor %}"
)

# Mistral Small 3.x: Pixtral's tower, its patches merged 2x2 into a token, rows of tokens ended by [IMG_BREAK] and
# the image by [IMG_END]; a plain Mistral language model. Images are read at up to 56 pixels a side, in 14s.
_MISTRAL3: dict[str, Any] = {
    "config": {
        "model_type": "mistral3",
        "text_config": dict(_TEXT, model_type="mistral", head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                            vocab_size=VOCAB + 10),
        "vision_config": {"model_type": "pixtral", "hidden_size": 32, "head_dim": 16, "intermediate_size": 48,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "patch_size": 7, "image_size": 56},
        "spatial_merge_size": 2,
        "vision_feature_layer": -1,
        "vocab_size": VOCAB + 10,
    },
    "tokens": ["<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[IMG]",
               "[IMG_BREAK]", "[IMG_END]"],
    "image_token": "[IMG]",
    "tokenizer": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"},
    "template": _MISTRAL_TEMPLATE,
    "processor": {"processor_class": "Mistral3Processor", "image_token": "[IMG]", "image_break_token": "[IMG_BREAK]",
                  "image_end_token": "[IMG_END]"},
    "image_processor": dict(_NORM, image_processor_type="PixtralImageProcessor", processor_class="Mistral3Processor",
                            size={"longest_edge": 56}, patch_size={"height": 14, "width": 14}),
}

# SmolVLM's: "User:" / "Assistant:" turns ended by <end_of_utterance>, `<image>` where an image goes.
_SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}: "
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

# SmolVLM (Idefics3's layout): a SigLIP tower on tiles of 28 pixels, each tile's 4x4 patches shuffled into 4 tokens;
# an image wider or taller than a tile is read as its tiles (<row_i_col_j> before each) and then whole, shrunk to
# one (<global-img>): several runs of image tokens. A plain Llama language model.
_SMOLVLM: dict[str, Any] = {
    "config": {
        "model_type": "smolvlm",
        "text_config": dict(_TEXT, model_type="llama", rms_norm_eps=1e-5, rope_theta=10000.0,
                            vocab_size=VOCAB + 8),
        "vision_config": dict(_SIGLIP, model_type="smolvlm_vision"),
        "scale_factor": 2,
        "vocab_size": VOCAB + 8,
    },
    "tokens": ["<end_of_utterance>", "<fake_token_around_image>", "<global-img>", "<image>", "<row_1_col_1>",
               "<row_1_col_2>", "<row_2_col_1>", "<row_2_col_2>"],  # (<|im_start|> is the tokenizer's own)
    "image_token": "<image>",
    "tokenizer": {"eos_token": "<end_of_utterance>", "pad_token": "<|endoftext|>"},
    "template": _SMOLVLM_TEMPLATE,
    "processor": {"processor_class": "SmolVLMProcessor", "image_seq_len": 4},
    "image_processor": dict(_NORM, image_processor_type="SmolVLMImageProcessor", processor_class="SmolVLMProcessor",
                            size={"longest_edge": 56}, max_image_size={"longest_edge": 28},
                            do_image_splitting=True, do_pad=True),
}

# Qwen-VL's chat: its markers around each image's tokens, ChatML turns.
_QWEN_CHAT: dict[str, Any] = {
    "tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
               "<|video_pad|>"],
    "image_token": "<|image_pad|>",
    "tokenizer": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "template": "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
                "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
                "{% for item in message['content'] %}{% if item['type'] == 'image' %}"
                "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}{% elif item['type'] == 'text' %}"
                "{{ item['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
}
_QWEN_VOCAB = VOCAB + 4  # (3 of its 7 tokens are the tokenizer's own already)
_MROPE = {"type": "mrope", "mrope_section": [2, 3, 3]}  # (the rotary pairs of a 16-wide head: time, height, width)
_QWEN3_TEXT = dict(_TEXT, head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0, vocab_size=_QWEN_VOCAB,
                   rope_scaling=dict(_MROPE, type="default", mrope_interleaved=True))
# Qwen 3.5's language model: gated-delta layers between full-attention ones.
_QWEN35_TEXT = dict(_TEXT, num_hidden_layers=4, full_attention_interval=2, head_dim=16, rms_norm_eps=1e-6,
                    vocab_size=_QWEN_VOCAB, linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16,
                    linear_value_head_dim=16, linear_conv_kernel_dim=4,
                    rope_parameters=dict(_MROPE, type="default", rope_theta=10000.0, partial_rotary_factor=1.0,
                                         mrope_interleaved=True))
_QWEN3_TOWER = {"depth": 2, "hidden_size": 32, "intermediate_size": 48, "out_hidden_size": 64, "num_heads": 2,
                "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 16}


def _qwen(config: dict[str, Any], processor: str, patch: int) -> dict[str, Any]:
    """A Qwen-VL family: its chat, `config`, and its processor reading images at 4x4 to 8x8 patches of `patch` pixels
    (2x2 patches merged into a token: 4 to 16 tokens)."""
    return dict(_QWEN_CHAT, config=config, processor={"processor_class": processor},
                image_processor=dict(_NORM, image_processor_type="Qwen2VLImageProcessor", processor_class=processor,
                                     patch_size=patch, merge_size=2, temporal_patch_size=2,
                                     min_pixels=(4 * patch) ** 2, max_pixels=(8 * patch) ** 2))

# Gemma 4: its own tower (patches of 7 pixels pooled 2x2 into a token, at most 4 tokens an image, the image resized
# to keep its shape) and projector; a Gemma 4 language model with per-layer inputs (the E2B/E4B layout), which
# the image positions take from the pad token. Sliding and full attention layers in turn.
_GEMMA4_IMAGES = {"image_processor_type": "Gemma4ImageProcessor", "patch_size": 7, "max_soft_tokens": 4,
                  "pooling_kernel_size": 2}
_GEMMA4: dict[str, Any] = {
    "scale": 1.0,
    "config": {
        "model_type": "gemma4",
        "text_config": dict(_TEXT, model_type="gemma4_text", head_dim=16, global_head_dim=16, num_kv_shared_layers=0,
                            hidden_size_per_layer_input=8, vocab_size=VOCAB + 8,
                            vocab_size_per_layer_input=VOCAB + 8, sliding_window=128,
                            layer_types=["sliding_attention", "full_attention"], use_double_wide_mlp=False),
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                          "head_dim": 16, "global_head_dim": 16, "patch_size": 7, "pooling_kernel_size": 2,
                          "position_embedding_size": 64, "default_output_length": 4},
        "hidden_size": 64,
        "vocab_size": VOCAB + 8,
        "vision_soft_tokens_per_image": 4,
        "pad_token_id": 0,
    },
    "tokens": ["<pad>", "<bos>", "<|turn>", "<turn|>", "<|image>", "<image|>", "<|image|>", "<|video|>"],
    "image_token": "<|image|>",
    "tokenizer": {"bos_token": "<bos>", "eos_token": "<turn|>", "pad_token": "<pad>",
                  "extra_special_tokens": {"boi_token": "<|image>", "eoi_token": "<image|>",
                                           "image_token": "<|image|>"}},
    "template": _GEMMA4_TEMPLATE,
    "processor": {"processor_class": "Gemma4Processor", "image_processor": _GEMMA4_IMAGES},
    "image_processor": dict(_GEMMA4_IMAGES, processor_class="Gemma4Processor"),
}

_PINPOINTS = [[28, 28], [28, 56], [56, 28], [56, 56]]  # (LLaVA-NeXT's and -OneVision's tile grids, in pixels)

# GLM-4.1V / 4.5V: Qwen2-VL's way of reading an image (patches of 14, 2x2 merged, on the image's own grid) and
# mRoPE positions; a GLM-4 language model rotating half of each head.
_GLM4V: dict[str, Any] = dict(_QWEN_CHAT, config={
    "model_type": "glm4v", "vocab_size": _QWEN_VOCAB,
    "text_config": dict(_TEXT, model_type="glm4v_text", vocab_size=_QWEN_VOCAB, partial_rotary_factor=0.5,
                        rope_scaling={"rope_type": "default", "mrope_section": [1, 1, 2]}),
    "vision_config": {"model_type": "glm4v", "depth": 1, "hidden_size": 32, "intermediate_size": 48,
                      "num_heads": 2, "patch_size": 14, "image_size": 56, "out_hidden_size": 64}},
    tokens=[*_QWEN_CHAT["tokens"][:3], "<|begin_of_image|>", "<|end_of_image|>", "<|image|>", "<|video|>"],
    image_token="<|image|>", markers={"vision_start_token_id": "<|begin_of_image|>",
                                      "vision_end_token_id": "<|end_of_image|>", "video_token_id": "<|video|>"},
    template=_QWEN_CHAT["template"].replace("<|vision_start|><|image_pad|><|vision_end|>",
                                            "<|begin_of_image|><|image|><|end_of_image|>"),
    processor={"processor_class": "Glm46VProcessor"},
    image_processor=dict(_NORM, image_processor_type="Glm4vImageProcessor", processor_class="Glm46VProcessor",
                         patch_size=14, merge_size=2, temporal_patch_size=2,
                         size={"shortest_edge": 56 * 56, "longest_edge": 112 * 112}))

# Kimi-VL: a MoonViT tower on the image's own shape in patches of 14, 2x2 merged into a token, <|media_pad|>
# expanded into them; a DeepSeek-V3 language model (multi-head latent attention).
_KIMI: dict[str, Any] = dict(_QWEN_CHAT, config={
    "model_type": "kimi_vl", "vocab_size": VOCAB + 5,
    "text_config": dict(_TEXT, model_type="deepseek_v3", vocab_size=VOCAB + 5, num_key_value_heads=4,
                        kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
                        moe_intermediate_size=32),
    "vision_config": {"model_type": "moonvit", "depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2,
                      "intermediate_size": 48, "patch_size": 14, "init_pos_emb_height": 8,
                      "init_pos_emb_width": 8}},
    tokens=[*_QWEN_CHAT["tokens"][:3], "<|media_start|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>",
            "<|placeholder|>"], image_token="<|media_pad|>",
    template=_QWEN_CHAT["template"].replace("<|vision_start|><|image_pad|><|vision_end|>",
                                            "<|media_start|>image<|media_content|><|media_pad|><|media_end|>"),
    processor={"processor_class": "KimiVLProcessor"}, image_processor={"processor_class": "KimiVLProcessor"})

_LLAVA: dict[str, Any] = {
    "config": {
        "model_type": "llava",
        "text_config": dict(_TEXT, model_type="llama", vocab_size=VOCAB + 4),
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "patch_size": 7, "image_size": 28,
                          "projection_dim": 32},
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": VOCAB + 4,
    },
    "tokens": ["<s>", "</s>", "<pad>", "<image>"],
    "image_token": "<image>",
    "tokenizer": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
                  "extra_special_tokens": {"image_token": "<image>"}},
    "template": _LLAVA_TEMPLATE,
    "processor": {"processor_class": "LlavaProcessor", "patch_size": 7, "vision_feature_select_strategy": "default",
                  "num_additional_image_tokens": 1, "image_token": "<image>"},
    "image_processor": dict(_NORM, image_processor_type="CLIPImageProcessor", processor_class="LlavaProcessor",
                            size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28},
                            do_center_crop=True),
}

# LLaVA-NeXT (1.6): llava's tower and language model, an image read whole and as tiles chosen from a grid of shapes
# (anyres), a newline's features after each row; mlx-vlm reads it with its GraniteVisionProcessor.
_LLAVA_NEXT: dict[str, Any] = {
    **_LLAVA, "config": dict(_LLAVA["config"], model_type="llava_next", image_grid_pinpoints=_PINPOINTS),
    "processor": dict(_LLAVA["processor"], processor_class="LlavaNextProcessor"),
    "image_processor": dict(_LLAVA["image_processor"], image_processor_type="LlavaNextImageProcessor",
                            processor_class="LlavaNextProcessor", image_grid_pinpoints=_PINPOINTS, do_pad=True),
}

FAMILIES: dict[str, dict[str, Any]] = {
    "gemma4": _GEMMA4,
    "gemma3": {
        "scale": 1.0,  # (at 3.0, Gemma's embedding scale saturates every reply into one repeated token)
        "config": {
            "model_type": "gemma3",
            "text_config": dict(_TEXT, model_type="gemma3_text", head_dim=16, query_pre_attn_scalar=16,
                                sliding_window=128, sliding_window_pattern=2, vocab_size=VOCAB + 8,
                                mm_tokens_per_image=4),
            "vision_config": _SIGLIP,
            "mm_tokens_per_image": 4,
            "hidden_size": 64,
            "vocab_size": VOCAB + 8,
            "pad_token_id": 0,
        },
        "tokens": ["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                   "<end_of_image>", "<image_soft_token>"],
        "image_token": "<image_soft_token>",
        "tokenizer": {"bos_token": "<bos>", "eos_token": "<end_of_turn>", "pad_token": "<pad>",
                      "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                               "image_token": "<image_soft_token>"}},
        "template": _GEMMA_TEMPLATE,
        "processor": {"processor_class": "Gemma3Processor", "image_seq_length": 4},
        "image_processor": dict(_NORM, image_processor_type="Gemma3ImageProcessor", processor_class="Gemma3Processor",
                                size={"height": 28, "width": 28}, do_pan_and_scan=False),
    },
    "llava": _LLAVA,
    "llava_next": _LLAVA_NEXT,
    # Granite Vision: LLaVA-NeXT's layout over a Granite language model. Refused with images as LLaVA-NeXT is.
    "granite_vision": {**_LLAVA_NEXT, "config": dict(
        _LLAVA_NEXT["config"], model_type="granite_vision", text_config=dict(_TEXT, model_type="granite",
                                                                         vocab_size=VOCAB + 4))},
    # Aya Vision: a SigLIP tower on tiles of 28 pixels (up to 2 and the whole image), 2x2 patches shuffled into each of
    # a tile's 4 tokens; a Cohere2 language model (sliding and full attention layers in turn).
    "aya_vision": dict(_QWEN_CHAT, config={
        "model_type": "aya_vision", "downsample_factor": 2, "alignment_intermediate_size": 64,
        "text_config": dict(_TEXT, model_type="cohere2", head_dim=16, vocab_size=VOCAB + 5, sliding_window=128,
                            sliding_window_pattern=2, rope_theta=10000.0),
        "vision_config": dict(_SIGLIP, model_type="siglip_vision_model"), "max_splits_per_img": 2},
        tokens=[*_QWEN_CHAT["tokens"][:3], "<image>", "<|START_OF_IMG|>", "<|END_OF_IMG|>", "<|IMG_PATCH|>",
                "<|IMG_LINE_BREAK|>"], image_token="<|IMG_PATCH|>",
        template=_QWEN_CHAT["template"].replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>"),
        processor={"processor_class": "AyaVisionProcessor", "patch_size": 7, "img_size": 28, "downsample_factor": 2},
        image_processor=dict(_NORM, image_processor_type="GotOcr2ImageProcessor",
                             processor_class="AyaVisionProcessor", size={"height": 28, "width": 28},
                             crop_to_patches=True, min_patches=1, max_patches=2)),
    "mistral3": _MISTRAL3,
    # Ministral 3: the same, over a Ministral3 language model whose attention is scaled (Llama 4 scaling) by position
    # from 16 tokens on (16384 in the real ones). Refused with images: mlx-vlm's scales every row by the first's.
    "ministral3": {**_MISTRAL3, "config": dict(_MISTRAL3["config"], text_config=dict(
        _MISTRAL3["config"]["text_config"], model_type="ministral3",
        rope_parameters={"type": "default", "rope_theta": 10000.0, "llama_4_scaling_beta": 2.0,
                         "original_max_position_embeddings": 16}))},
    # Gemma 4 whose language model attends both ways among an image's tokens (use_bidirectional_attention "vision"):
    # mlx-vlm reads such a prompt in one pass, the overlay on its mask. Refused with images: the slots read causally.
    "gemma4_bidirectional": {**_GEMMA4, "config": dict(_GEMMA4["config"], text_config=dict(
        _GEMMA4["config"]["text_config"], use_bidirectional_attention="vision"))},
    # Mistral Large 3: Mistral 3's tower and projector over a DeepSeek-V3 language model (latent attention, 4 experts, 2
    # a token, after a dense first layer).
    "mistral_large3": {**_MISTRAL3, "config": dict(_MISTRAL3["config"], model_type="mistral_large3", text_config=dict(
        _TEXT, model_type="mistral_large3", vocab_size=VOCAB + 10, num_key_value_heads=4, q_lora_rank=16,
        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, moe_intermediate_size=32,
        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1))},
    # Pixtral (12B): the same tower, its patches each a token (no merge), rows of them ended by [IMG_BREAK] and the
    # image by [IMG_END]; a Mistral language model. Images are read at up to 28 pixels a side, in patches of 7.
    "pixtral": {**_MISTRAL3, "config": dict(_MISTRAL3["config"], model_type="pixtral", vision_config=dict(
        _MISTRAL3["config"]["vision_config"], image_size=28)),
        "processor": dict(_MISTRAL3["processor"], processor_class="PixtralProcessor", patch_size=7,
                          spatial_merge_size=1),
        "image_processor": dict(_MISTRAL3["image_processor"], processor_class="PixtralProcessor",
                                size={"longest_edge": 28}, patch_size={"height": 7, "width": 7})},
    "smolvlm": _SMOLVLM,
    # Idefics3: SmolVLM's layout under its own name and processor (SmolVLM's were made from it).
    "idefics3": {**_SMOLVLM, "config": dict(_SMOLVLM["config"], model_type="idefics3", vision_config=dict(
        _SIGLIP, model_type="idefics3_vision")),
        "processor": dict(_SMOLVLM["processor"], processor_class="Idefics3Processor"),
        "image_processor": dict(_SMOLVLM["image_processor"], image_processor_type="Idefics3ImageProcessor",
                                processor_class="Idefics3Processor")},
    # LFM2-VL: a SigLIP2 tower on patches of 7 pixels at the image's own shape, 2x2 of them unshuffled into a token; a
    # larger image is read as tiles of 28 pixels and a thumbnail. Its language model, LFM2, has convolution layers
    # (recurrent state) between attention ones.
    "lfm2-vl": {
        "scale": 2.5,  # (at 3.0, one of the test's replies ends at its fourth token)
        "config": {
            "model_type": "lfm2-vl",
            "text_config": dict(_TEXT, model_type="lfm2", num_hidden_layers=3, layer_types=["full_attention", "conv",
                                "full_attention"], block_ff_dim=96, block_auto_adjust_ff_dim=False, conv_L_cache=3,
                                block_dim=64, conv_dim=64, conv_dim_out=64, conv_bias=False, block_multiple_of=16,
                                block_ffn_dim_multiplier=1.0, num_heads=4, norm_eps=1e-5,
                                rope_theta=10000.0, vocab_size=VOCAB + 14),
            "vision_config": {"model_type": "lfm2_vl", "hidden_size": 32, "intermediate_size": 48,
                              "num_hidden_layers": 1, "num_attention_heads": 2, "patch_size": 7, "num_patches": 16},
            "downsample_factor": 2,
            "encoder_patch_size": 7,
            "projector_hidden_size": 32,
            "vocab_size": VOCAB + 14,
        },
        "tokens": ["<|im_start|>", "<|im_end|>", "<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>",
                   "<|pad|>", *(f"<|img_row_{r}_col_{c}|>" for r in (1, 2, 3) for c in (1, 2, 3))],
        "image_token": "<image>",
        "tokenizer": {"eos_token": "<|im_end|>", "pad_token": "<|pad|>"},
        "template": _QWEN_CHAT["template"].replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>"),
        "processor": {"processor_class": "Lfm2VlProcessor"},
        "image_processor": dict(_NORM, image_processor_type="Lfm2VlImageProcessor", processor_class="Lfm2VlProcessor",
                                encoder_patch_size=7, downsample_factor=2, min_image_tokens=4, max_image_tokens=16,
                                tile_size=28),
    },
    # Its language model rotates by mRoPE positions, kept per slot (engine.kv.mrope). Images of 56 to 112 pixels
    # a side are read whole (grids of 2x2 to 4x4 merged patches): each size moves the positions after it differently.
    "qwen2_5_vl": _qwen(
        dict(_TEXT, model_type="qwen2_5_vl", rms_norm_eps=1e-6, vocab_size=_QWEN_VOCAB, rope_scaling=_MROPE,
             vision_config={"model_type": "qwen2_5_vl", "depth": 1, "hidden_size": 32, "intermediate_size": 48,
                            "out_hidden_size": 64, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2,
                            "temporal_patch_size": 2, "window_size": 56, "fullatt_block_indexes": [0]}),
        "Qwen2_5_VLProcessor", patch=14),
    # Qwen 2.5-VL's elder: the same mRoPE, a plainer tower.
    "qwen2_vl": _qwen(
        dict(_TEXT, model_type="qwen2_vl", rms_norm_eps=1e-6, vocab_size=_QWEN_VOCAB, rope_scaling=_MROPE,
             vision_config={"model_type": "qwen2_vl", "depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2,
                            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}),
        "Qwen2VLProcessor", patch=14),
    # mRoPE too, and DeepStack: the tower's earlier layers' features are added to the first layers' states at the
    # image's positions. Patches of 16: the same images are read on grids of 2x2 to 4x4 merged patches.
    "qwen3_vl": _qwen(
        {"model_type": "qwen3_vl", "vocab_size": _QWEN_VOCAB,
         "text_config": dict(_QWEN3_TEXT, model_type="qwen3_vl"),
         "vision_config": dict(_QWEN3_TOWER, model_type="qwen3_vl", deepstack_visual_indexes=[0])},
        "Qwen3VLProcessor", patch=16),
    # Its mixture-of-experts sibling (Qwen3-VL-30B-A3B): 4 experts, 2 a token, in every layer.
    "qwen3_vl_moe": _qwen(
        {"model_type": "qwen3_vl_moe", "vocab_size": _QWEN_VOCAB,
         "text_config": dict(_QWEN3_TEXT, model_type="qwen3_vl_moe", num_experts=4, num_experts_per_tok=2,
                             decoder_sparse_step=1, mlp_only_layers=[], moe_intermediate_size=32),
         "vision_config": dict(_QWEN3_TOWER, model_type="qwen3_vl_moe", deepstack_visual_indexes=[0])},
        "Qwen3VLProcessor", patch=16),
    # InternVL 3.5 (the -hf layout): an InternViT tower on tiles of 28 pixels, each tile's 4x4 patches shuffled into 4
    # tokens between <img> and </img>, a larger image read as up to 2 tiles and a thumbnail; a Qwen3 language model.
    "internvl": dict(_QWEN_CHAT, config={
        "model_type": "internvl", "vocab_size": VOCAB + 3, "max_dynamic_patch": 2,
        "text_config": dict(_TEXT, model_type="qwen3", head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0,
                            vocab_size=VOCAB + 3, tie_word_embeddings=False),
        "vision_config": {"model_type": "internvl_vision", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 28, "patch_size": 7}},
        tokens=[*_QWEN_CHAT["tokens"][:3], "<img>", "</img>", "<IMG_CONTEXT>"], image_token="<IMG_CONTEXT>",
        template=_QWEN_CHAT["template"].replace("<|vision_start|><|image_pad|><|vision_end|>", "<IMG_CONTEXT>"),
        processor={"processor_class": "InternVLProcessor", "image_seq_length": 4},
        image_processor=dict(_NORM, image_processor_type="InternVLImageProcessor",
                             processor_class="InternVLProcessor")),
    "kimi_vl": _KIMI,
    # Kimi K2.5: the same tower and language model (here with 4 experts, 2 a token) under its own processor, which
    # expands <|media_pad|> among the prompt's token ids.
    "kimi_k25": {**_KIMI, "config": dict(_KIMI["config"], model_type="kimi_k25", text_config=dict(
        _KIMI["config"]["text_config"], n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1,
        topk_group=1)),
        "processor": {"processor_class": "KimiK25Processor"},
        "image_processor": {"processor_class": "KimiK25Processor"}},
    "glm4v": _GLM4V,
    # GLM-OCR: GLM-4.1V's way of reading an image under its own processor, a GLM language model rotating whole heads.
    "glm_ocr": {**_GLM4V, "config": {
        "model_type": "glm_ocr", "vocab_size": _QWEN_VOCAB,
        "text_config": dict(_TEXT, model_type="glm_ocr_text", vocab_size=_QWEN_VOCAB, head_dim=16,
                            num_nextn_predict_layers=0, rope_parameters={"rope_type": "default", "rope_theta": 10000,
                                                                         "mrope_section": [2, 3, 3]}),
        "vision_config": dict(_GLM4V["config"]["vision_config"], model_type="glm_ocr_vision")},
        "markers": {"image_start_token_id": "<|begin_of_image|>", "image_end_token_id": "<|end_of_image|>",
                    "video_token_id": "<|video|>"},
        "processor": {"processor_class": "GlmOcrProcessor"},
        "image_processor": dict(_GLM4V["image_processor"], processor_class="GlmOcrProcessor")},
    # PaddleOCR-VL: a SigLIP-like tower on the image's own grid of 14-pixel patches, 2x2 merged, <|IMAGE_PLACEHOLDER|>
    # expanded into them; an ERNIE 4.5 language model (its config at the top level) rotating by mRoPE, 1024 wide (the
    # width mlx-vlm's projector is built for).
    "paddleocr_vl": dict(_QWEN_CHAT, config={
        **_TEXT, "model_type": "paddleocr_vl", "hidden_size": 1024, "vocab_size": VOCAB + 4, "head_dim": 16,
        "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "default", "type": "default", "mrope_section": [2, 3, 3]},
        "vision_config": {"model_type": "paddleocr_vl", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 56, "patch_size": 14}},
        tokens=[*_QWEN_CHAT["tokens"][:3], "<|IMAGE_START|>", "<|IMAGE_END|>", "<|IMAGE_PLACEHOLDER|>",
                "<|video_pad|>"],
        image_token="<|IMAGE_PLACEHOLDER|>", markers={"vision_start_token_id": "<|IMAGE_START|>",
                                                      "vision_end_token_id": "<|IMAGE_END|>"},
        template=_QWEN_CHAT["template"].replace("<|vision_start|><|image_pad|><|vision_end|>",
                                                "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"),
        processor={"processor_class": "PaddleOCRVLProcessor"},
        image_processor=dict(_NORM, processor_class="PaddleOCRVLProcessor", patch_size=14, merge_size=2,
                             temporal_patch_size=1, min_pixels=56 * 56, max_pixels=112 * 112)),
    # LLaVA-OneVision: a SigLIP tower on tiles of 28 pixels (16 tokens each) chosen from a grid of shapes for the
    # image (anyres), the whole image too, a newline's features after each row; a Qwen2 language model.
    "llava_onevision": dict(_QWEN_CHAT, scale=2.5, config={  # (at 3.0 a reply ends at its fourth token)
        "model_type": "llava_onevision", "vocab_size": VOCAB + 2, "image_grid_pinpoints": _PINPOINTS,
        "vision_aspect_ratio": "anyres_max_4",
        "text_config": dict(_TEXT, model_type="qwen2", vocab_size=VOCAB + 2, rope_theta=10000.0),
        "vision_config": dict(_SIGLIP, num_hidden_layers=1)},
        tokens=[*_QWEN_CHAT["tokens"][:3], "<image>", "<video>"], image_token="<image>",
        template=_QWEN_CHAT["template"].replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>"),
        processor={"processor_class": "LlavaOnevisionProcessor", "num_image_tokens": 16,
                   "vision_feature_select_strategy": "full", "image_token": "<image>", "video_token": "<video>"},
        image_processor=dict(_NORM, image_processor_type="LlavaOnevisionImageProcessor",
                             processor_class="LlavaOnevisionProcessor", size={"height": 28, "width": 28},
                             image_grid_pinpoints=_PINPOINTS, do_pad=True)),
    # Qwen 3.5: mRoPE over a hybrid language model (gated-delta layers between full-attention ones), no DeepStack.
    # Refused with images: those layers call mlx-vlm's own cache (tests/engine/test_vision.py).
    "qwen3_5": _qwen({"model_type": "qwen3_5", "vocab_size": _QWEN_VOCAB,
                      "text_config": dict(_QWEN35_TEXT, model_type="qwen3_5"),
                      "vision_config": dict(_QWEN3_TOWER, model_type="qwen3_5")}, "Qwen3VLProcessor", patch=16),
    # Its mixture-of-experts sibling (Qwen3.5-35B-A3B), refused the same way.
    "qwen3_5_moe": _qwen({"model_type": "qwen3_5_moe", "vocab_size": _QWEN_VOCAB,
                          "text_config": dict(_QWEN35_TEXT, model_type="qwen3_5_moe", num_experts=4,
                                              num_experts_per_tok=2, shared_expert_intermediate_size=32,
                                              moe_intermediate_size=32),
                          "vision_config": dict(_QWEN3_TOWER, model_type="qwen3_5_moe")}, "Qwen3VLProcessor",
                         patch=16),
}

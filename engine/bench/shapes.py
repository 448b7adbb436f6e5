"""Random-weight llama models of named, realistic shapes, built on the fly for throughput runs (no download).

Speed depends on a model's shape, not on what its weights learned, so `mlxchat bench --shape 1B`
measures a 1B-class model on a machine that has none. Weights are float32 on a CPU (as real
models are converted there) and bfloat16 on a GPU; `--bits 4` (or 8) quantizes them as mlx-community's
4-bit models are (MLX's affine quantization, groups of 64).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxchat.engine.loading.models import LoadedModel, ModelLoadError, ModelSource

# Memory kept free besides the weights: KV, activations and the rest of the process.
HEADROOM_BYTES = 2 * 2**30


@dataclass(frozen=True)
class Shape:
    """A llama's dimensions, as its config.json would give them."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    like: str  # the public model of this shape

    def parameters(self) -> int:
        """How many weights a llama of this shape has."""
        head_dim = self.hidden // self.heads
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head_dim
        mlp = 3 * self.hidden * self.intermediate
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * (attention + mlp + 2 * self.hidden) + embeddings + self.hidden


SHAPES = {
    "135M": Shape(576, 30, 9, 3, 1536, 49152, True, "SmolLM2-135M"),
    "1B": Shape(2048, 16, 32, 8, 8192, 32000, True, "Llama-3.2-1B with a 32k vocabulary"),
    "8B": Shape(4096, 32, 32, 8, 14336, 128256, False, "Llama-3.1-8B"),
    # Little arithmetic in many layers: a step costs what its operations cost to issue, not their math.
    "narrow": Shape(64, 30, 4, 2, 256, 2048, True, "no public model: 30 layers 64 wide, overhead only"),
}


QUANTIZE_BITS = (4, 8)
GROUP_SIZE = 64


def build_shape(name: str, bits: int | None = None, tuning_file: Path | None = None) -> LoadedModel:
    """A random-weight llama of the shape `name` (its linear layers quantized to `bits` if given), with a
    tokenizer whose ids cover its vocabulary, and how this machine runs it fastest where `doctor --tune`
    measured it in `tuning_file` (as load_model reads it).

    Raises ModelLoadError for an unknown name, or when the weights would not fit in memory here.
    """
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    from mlxchat.engine.devices import device_kind
    from mlxchat.engine.cpu.stored import HeldWeights, hold_weights
    from mlxchat.engine.cpu.tuning import load_tuning
    from mlxchat.engine.kv.kv_types import KVType
    from mlxchat.engine.loading.batch_check import ready_for_slots
    from mlxchat.engine.kv.kinds import model_footprint
    from mlxchat.engine.memory import format_bytes, memory_info

    if name not in SHAPES:
        raise ModelLoadError(f"--shape {name}: choose one of {', '.join(SHAPES)}")
    shape = SHAPES[name]
    dtype = mx.float32 if device_kind() == "cpu" else mx.bfloat16
    need = shape.parameters() * dtype.size
    available = memory_info().available_bytes
    if available is not None and need + HEADROOM_BYTES > available:
        raise ModelLoadError(
            f"--shape {name} needs {format_bytes(need)} of {dtype_name(dtype)} weights and only "
            f"{format_bytes(available)} of memory is available here: choose a smaller shape"
            + (" (on a CPU the weights are float32)" if dtype == mx.float32 else "")
        )
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        intermediate_size=shape.intermediate,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        rms_norm_eps=1e-5,
        vocab_size=shape.vocab,
        tie_word_embeddings=shape.tied,
        rope_theta=500000.0,
    )
    model = llama.Model(args)
    model.set_dtype(dtype)
    for _, weight in tree_flatten(model.parameters()):  # one at a time: the float32 draws never pile up
        mx.eval(weight)
    held = HeldWeights(dtype_name(dtype), kernel_matmuls=False, int8_activations=False)
    if bits is not None:
        nn.quantize(model, group_size=GROUP_SIZE, bits=bits)
        mx.eval(model.parameters())
        held = hold_weights(model, "auto", False)  # held as a quantized model loaded here is: kernels on a CPU
    return LoadedModel(
        ready=ready_for_slots(model, _numbered_tokenizer(shape.vocab)),
        source=ModelSource(f"shape:{name}", "shape", None,
                           f"random llama {name} ({shape.like}){f', {bits}-bit' if bits else ''}", None),
        mlx_path=Path(),
        weights=held,
        weights_bytes=sum(p.nbytes for _, p in tree_flatten(model.parameters())),
        trained_ctx=None,
        kv_type=KVType(),  # K/V as computed
        kv_footprint=model_footprint(model, KVType()),
        config={},
        tuning=load_tuning(model, tuning_file) if tuning_file else None,
    )


def dtype_name(dtype: Any) -> str:
    """"float32" for mx.float32."""
    return str(dtype).rsplit(".", 1)[-1]


# Every message's text, then the assistant's turn: what the bench's prompts need of a template.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"


def _numbered_tokenizer(vocab: int) -> Any:
    """A tokenizer with one token per id ("t0", "t1", ...): any id a random model picks decodes.

    Text splits into words and punctuation (a little fewer than a BPE vocabulary gives English),
    each the unknown token: prompts get a realistic length, which is all a throughput run needs.
    Its tokens are SentencePiece-style words ("▁t7"), so mlx-lm streams them with its SPM detokenizer,
    a lookup a token (1.3 us), as real models' detokenizers are; the naive one decoded the reply's last
    words again through transformers at every token (36-50 us a token on an AMD EPYC: 3.2 ms a step at 64
    slots that a real model does not pay, and mlx-lm's BatchGenerator, which does not detokenize, never did).
    """
    from mlx_lm.tokenizer_utils import SPMStreamingDetokenizer, TokenizerWrapper
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({f"\u2581t{i}": i for i in range(vocab)}, unk_token="\u2581t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Metaspace()])
    tokenizer.decoder = decoders.Metaspace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="\u2581t0", eos_token=f"\u2581t{vocab - 1}")
    fast.chat_template = CHAT_TEMPLATE
    return TokenizerWrapper(fast, detokenizer_class=SPMStreamingDetokenizer)

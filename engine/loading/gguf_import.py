"""Converts a llama GGUF file once into an MLX model folder in the user cache, which mlx-lm then loads as is."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from mlxchat.engine.loading.gguf_vocab import write_tokenizer_files
from mlxchat.engine.loading.progress import ModelLoadError, Progress

if TYPE_CHECKING:
    import mlx.core as mx

HASH_CHUNK = 1 << 22
GGUF_BLOCK = 32  # weights per block in GGUF's Q4_0, Q4_1 and Q8_0
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)$")


def file_digest(path: Path, progress: Callable[[Progress], None]) -> str:
    """The sha256 of the whole file: about 0.1 s for the 98 MB default model, and never fooled by a same-size edit."""
    total = path.stat().st_size
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            progress(Progress(f"Checking {path.name}", done, total))
    return digest.hexdigest()


def convert_gguf(path: Path, cache_dir: Path, progress: Callable[[Progress], None] | None = None) -> Path:
    """The MLX folder for the GGUF at `path`, converted on first use into `cache_dir` and reused while the
    file is unchanged."""
    report = progress or (lambda _: None)
    target = cache_dir / f"{path.stem}-{file_digest(path, report)[:16]}"
    if target.is_dir():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed into place when complete, so an interrupted conversion is never reused.
        aside = tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent, ignore_cleanup_errors=True)
        with aside as work:
            write_mlx_folder(path, Path(work), report)
            try:
                os.rename(work, target)
            except OSError:
                if not target.is_dir():  # rather than another process having finished the same conversion first
                    raise
    except OSError as e:
        raise ModelLoadError(
            f"The converted model could not be written under {target.parent} ({e}). "
            "Free some disk space or choose a writable cache folder (XDG_CACHE_HOME)."
        ) from e
    return target


def _plain(value: Any) -> Any:
    """A GGUF metadata value as plain Python (mx.load gives scalars and numeric arrays as mx.array)."""
    import mlx.core as mx
    import numpy as np

    if not isinstance(value, mx.array):
        return value
    if value.dtype == mx.float32 and value.ndim == 0:
        # The shortest decimal that is the same float32, so config.json says 1e-05 rather than 9.9999997e-06.
        return float(str(np.float32(value.item())))
    return value.item() if value.ndim == 0 else value.tolist()


def read_gguf(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """The tensors and the metadata of a GGUF file, with errors turned into ModelLoadError."""
    import mlx.core as mx

    try:
        weights, meta = mx.load(str(path), format="gguf", return_metadata=True)
    except (RuntimeError, ValueError) as e:
        raise ModelLoadError(f"{path} could not be read as a GGUF file ({e}).") from e
    meta = {key: _plain(value) for key, value in meta.items()}
    arch = meta.get("general.architecture")
    if arch != "llama":
        from mlxchat.engine.loading.families import UnsupportedFamily

        raise ModelLoadError(
            f"{path.name} is a '{arch}' model; mlxchat imports only llama-architecture GGUF files. "
            "Use an MLX folder or a Hugging Face id of this model instead."
        ) from UnsupportedFamily(f"GGUF architecture '{arch}'")
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ModelLoadError(
            f"{path.name} uses the '{meta.get('tokenizer.ggml.model')}' tokenizer; mlxchat's GGUF import "
            "reads only gpt2 (byte-level BPE) vocabularies. Use an MLX folder of this model instead."
        )
    return weights, meta


def _config(meta: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """An mlx-lm llama config.json from the GGUF's llama.* metadata."""
    hidden, n_head = meta["llama.embedding_length"], meta["llama.attention.head_count"]
    head_dim = meta.get("llama.attention.key_length") or meta.get("llama.rope.dimension_count") or hidden // n_head
    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": meta["llama.block_count"],
        "intermediate_size": meta["llama.feed_forward_length"],
        "num_attention_heads": n_head,
        "num_key_value_heads": meta.get("llama.attention.head_count_kv", n_head),
        "rms_norm_eps": meta["llama.attention.layer_norm_rms_epsilon"],
        "rope_theta": meta.get("llama.rope.freq_base", 10000.0),
        "vocab_size": meta.get("llama.vocab_size") or len(meta["tokenizer.ggml.tokens"]),
        "tie_word_embeddings": "lm_head.weight" not in names,
        "attention_bias": any(n.endswith("self_attn.q_proj.bias") for n in names),
        "mlp_bias": any(n.endswith("mlp.up_proj.bias") for n in names),
    }
    if head_dim != hidden // n_head:
        config["head_dim"] = head_dim
    if "llama.context_length" in meta:
        config["max_position_embeddings"] = meta["llama.context_length"]
    if meta.get("llama.rope.scaling.type") == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": meta["llama.rope.scaling.factor"]}
    if "tokenizer.ggml.eos_token_id" in meta:
        config["eos_token_id"] = meta["tokenizer.ggml.eos_token_id"]
    if "tokenizer.ggml.bos_token_id" in meta:
        config["bos_token_id"] = meta["tokenizer.ggml.bos_token_id"]
    return config


def mlx_name(gguf_name: str, file_name: str) -> str:
    """The mlx-lm llama name of a GGUF tensor, e.g. blk.3.attn_q.scales -> model.layers.3.self_attn.q_proj.scales."""
    module, leaf = gguf_name.rsplit(".", 1)
    if module in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[module]}.{leaf}"
    match = BLOCK_RE.match(module)
    if not match or match.group(2) not in LAYER_NAMES:
        # Dropping an unknown tensor (e.g. Llama 3.1's rope_freqs) would quietly give a different model.
        raise ModelLoadError(
            f"{file_name} has a tensor mlxchat's GGUF import does not know ({gguf_name}). "
            "Use an MLX folder or a Hugging Face id of this model instead."
        )
    return f"model.layers.{match.group(1)}.{LAYER_NAMES[match.group(2)]}.{leaf}"


def unpermute_rows(w: mx.array, n_head: int) -> mx.array:
    """Undoes llama.cpp's RoPE row permutation of a q/k projection (weight, scales, biases or bias alike)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_mlx_folder(path: Path, folder: Path, progress: Callable[[Progress], None]) -> None:
    """Writes model.safetensors, config.json and the tokenizer files for the GGUF at `path` into `folder`."""
    import mlx.core as mx

    gguf_weights, meta = read_gguf(path)
    weights = {mlx_name(name, path.name): value for name, value in gguf_weights.items()}
    config = _config(meta, set(weights))
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}

    stage = f"Converting {path.name}"
    for done, name in enumerate(sorted(weights), start=1):
        projection = name.rsplit(".", 2)[-2]
        if projection in heads:
            weights[name] = unpermute_rows(weights[name], heads[projection])
        # Evaluated tensor by tensor so that the progress shown follows the actual work.
        mx.eval(weights[name])
        progress(Progress(stage, done, len(weights)))

    # mx.load gives Q4_0/Q4_1/Q8_0 tensors as affine triples over GGUF's 32-weight blocks; each module
    # keeps the bits it was stored with (the default model has a q8 embedding and q4 layers).
    quantized = {
        name.removesuffix(".scales"): {
            "group_size": GGUF_BLOCK,
            "bits": weights[name.removesuffix(".scales") + ".weight"].shape[-1] * 32
            // (scales.shape[-1] * GGUF_BLOCK),
        }
        for name, scales in sorted(weights.items())
        if name.endswith(".scales")
    }
    if quantized:
        bits = Counter(q["bits"] for q in quantized.values()).most_common(1)[0][0]
        config["quantization"] = {"group_size": GGUF_BLOCK, "bits": bits, **quantized}

    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    write_tokenizer_files(meta, folder)


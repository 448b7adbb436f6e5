"""Tiny configurations for every model module the installed mlx-lm ships, generated from each
module's `ModelArgs`: its fields and defaults, with one table of rules that shrink the sizes.

Nothing here names a family: a field is set by what its name says it is (a width, a layer count,
a number of experts, a window), whatever module it is in. A module whose arguments these rules
cannot fill, or whose model then fails to build or run, is reported with the reason
(`NotTiny`), never guessed at by hand.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import types
from typing import Any

VOCAB = 384  # the size of tests/tiny_model.py's tokenizer, so saved folders can chat
WINDOW = 8  # windows shorter than the test prompts, so rings wrap
LAYERS = 4  # with every periodic pattern at 2, both kinds of a hybrid's layers appear
WIDTH = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16

# Each rule: the field names it sets, and the value. A name is a role wherever it appears.
_RULES: list[tuple[tuple[str, ...], Any]] = [
    (("hidden_size", "d_model", "n_embd", "dim", "model_dim", "block_dim", "embed_dim"), WIDTH),
    (("num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_transformer_layers"), LAYERS),
    (
        ("num_attention_heads", "n_head", "n_heads", "num_heads", "num_query_heads", "swa_num_attention_heads",
         "swa_num_heads", "linear_num_value_heads", "n_shared_head"),
        HEADS,
    ),
    # SSM heads span width x 2 (the expand factor transformers assumes when it checks a config).
    (("mamba_n_heads", "mamba_num_heads", "num_heads"), 2 * WIDTH // HEAD_DIM),
    (
        ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "n_head_kv", "swa_num_key_value_heads",
         "num_global_key_value_heads", "linear_num_key_heads", "multi_query_group_num", "num_attention_groups"),
        KV_HEADS,
    ),
    (
        ("head_dim", "swa_head_dim", "swa_v_head_dim", "global_head_dim", "kv_channels", "mamba_d_head",
         "mamba_head_dim", "linear_key_head_dim", "linear_value_head_dim", "v_head_dim", "qk_nope_head_dim",
         "index_head_dim", "hidden_size_per_head", "qk_head_dim", "head_size"),
        HEAD_DIM,
    ),
    (("qk_rope_head_dim", "rotary_dim"), HEAD_DIM // 2),
    (
        ("intermediate_size", "ffn_hidden_size", "n_inner", "ff_intermediate_size", "intermediate_size_mlp",
         "block_ff_dim", "hidden_dim", "ffn_dim"),
        96,
    ),
    (
        ("moe_intermediate_size", "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
         "expert_ffn_hidden_size", "shared_intermediate_size", "share_expert_dim"),
        32,
    ),
    (("vocab_size", "num_vocab", "vocab_size_per_layer_input"), VOCAB),
    (("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    (
        ("num_experts_per_tok", "moe_topk", "moe_top_k", "top_k_experts", "num_experts_per_token", "moe_k",
         "num_selected_experts"),
        2,
    ),
    (("n_shared_experts", "num_shared_experts", "num_shared_expert", "moe_num_shared_experts"), 1),
    (("n_group", "topk_group", "num_expert_group", "mamba_n_groups", "n_groups"), 1),
    (("kv_lora_rank", "o_lora_rank"), 16),
    (("a_low_rank_dim", "v_low_rank_dim", "gate_low_rank_dim", "decay_low_rank_dim", "time_step_rank"), 8),
    (("sliding_window", "sliding_window_size", "attention_window_size", "window_size", "attention_chunk_size"), WINDOW),
    (
        ("sliding_window_pattern", "full_attention_interval", "moe_layer_freq", "layer_group_size",
         "no_rope_layer_interval", "attn_layer_period", "expert_layer_period", "mamba_step",
         "dense_attention_every_n_layers", "interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_interval"),
        2,
    ),
    (("attn_layer_offset", "expert_layer_offset", "first_k_dense_replace", "num_dense_layers"), 1),
    (("mamba_d_state", "state_size", "ssm_state_size", "d_state"), 16),
    (("q_lora_rank",), 16),
    (("index_topk",), 16),
    (("mamba_d_ssm",), 2 * WIDTH),
    (("mamba_chunk_size", "chunk_size"), 16),
    (("num_kv_shared_layers", "num_kv_reuse_layers", "num_nextn_predict_layers"), 0),
    (("hidden_size_per_layer_input",), 16),
    (("index_n_heads",), HEADS),
]
RULES = {name: value for names, value in _RULES for name in names}
# Parts an architecture may leave out (experts, a low-rank query, a window, shared layers): where the
# default is empty (0, None, False) the part stays out, as the defaults describe the model.
OPTIONAL_PARTS = {
    "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok",
    "n_shared_experts", "num_shared_experts", "num_shared_expert", "moe_num_shared_experts", "q_lora_rank",
    "sliding_window", "sliding_window_size", "attention_window_size", "window_size", "attention_chunk_size",
    "num_kv_shared_layers", "num_kv_reuse_layers", "moe_intermediate_size", "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size", "shared_intermediate_size", "kv_lora_rank", "first_k_dense_replace",
}
# Set whatever the default: a base the model refuses to guess.
ALWAYS = {"rope_theta": 10000.0}

# Values for required fields no rule names, by what the name says; the first match wins.
_REQUIRED_BY_SUFFIX: list[tuple[str, Any]] = [
    ("_eps", 1e-5),
    ("epsilon", 1e-5),
    ("max_position_embeddings", 4096),
    ("n_positions", 4096),
    ("n_ctx", 4096),
    ("model_max_length", 4096),
    ("rope_theta", 10000.0),
    ("_base", 10000.0),
    ("_layers", []),
    ("conv_kernel", 4),
    ("_kernel_dim", 4),
    ("_d_conv", 4),
    ("conv1d_width", 4),
    ("conv_window", 2),
    ("conv_L_cache", 3),
    ("multiple_of", 16),
    ("block_size", 4096),
    ("hidden_act", "silu"),
    ("expand", 2),
    ("topk_method", "noaux_tc"),
    ("scoring_func", "sigmoid"),
    ("rope_scaling", None),
    ("share_factor", 1),
    ("group_norm_size", 1),
    ("time_step_limit", (0.0, float("inf"))),
]
# Fields that list each layer's kind: filled in turn with the kinds the module's own code tests for.
LAYER_KIND_FIELDS = ("layer_types", "hybrid_layer_pattern", "layers_block_type", "block_types")
# A kind name where the code compares with it, looks it up, or lists it.
_KIND_LITERAL = re.compile(
    r"""(?:[=!]=\s*|index\(|\[)["']([a-z_]*(?:attention|mamba|linear|conv|ssm|recurrent)[a-z_]*)["']"""
    r"""|["']([a-z_]*(?:attention|mamba|linear|conv|ssm|recurrent)[a-z_]*)["']\s*(?:[=!]=|in\b|not in\b|\]|:)"""
)


# Modules whose tiny model mlx-lm itself cannot run in this process: what happens, seen here.
CRASHES = {
    "phi3small": "mlx-lm's own forward corrupts the heap on MLX's CPU build (glibc: 'corrupted size vs. "
    "prev_size', then a crash), with OpenBLAS and without, dense or block-sparse layers",
}


class NotTiny(Exception):
    """The module's arguments cannot be filled by the rules, or its tiny model does not build or run."""


def model_modules() -> list[str]:
    """Every module of the installed mlx-lm that defines a Model and its ModelArgs (or why one does not import)."""
    import mlx_lm.models as models

    return sorted(info.name for info in pkgutil.iter_modules(models.__path__) if not info.name.startswith("_"))


def load_module(name: str) -> types.ModuleType:
    try:
        module = importlib.import_module(f"mlx_lm.models.{name}")
    except BaseException as exc:  # some modules exit at import when an optional package is missing
        raise NotTiny(f"it does not import: {type(exc).__name__}: {exc}") from None
    return module


def is_model_module(name: str) -> bool:
    try:
        module = load_module(name)
    except NotTiny:
        return True  # listed, then reported as not importable
    return dataclasses.is_dataclass(getattr(module, "ModelArgs", None)) and hasattr(module, "Model")


def tiny_config(name: str) -> dict[str, Any]:
    """The tiny config of module `name`: ModelArgs' defaults with every sized field shrunk by the rules.

    Where the defaults leave every per-layer list empty and the model does not build so, the first
    list is filled (one layer of each kind in turn). Where the model reads a RoPE dict the defaults
    leave out, the dict is given the keys it asks for (ROPE_KEYS), one failure at a time.
    """
    if name in CRASHES:
        raise NotTiny(CRASHES[name])
    module = load_module(name)
    failure: Exception | None = None
    for fill_layers in (False, True):
        config = _fill(module.ModelArgs, name, fill_layers)
        if any(f.name == "text_config" for f in dataclasses.fields(module.ModelArgs)) and not config.get("text_config"):
            config["text_config"] = _text_config(module)
        for _ in range(len(ROPE_KEYS) + 1):
            try:
                _model(config)
                return config
            except NotTiny:
                raise
            except Exception as exc:
                failure = failure or exc
                if not _give_rope_what_it_asks(config, module.ModelArgs, exc):
                    break
    raise NotTiny(f"its model does not build: {type(failure).__name__}: {failure}")


# The keys a RoPE dict may be asked for, with values that leave positions as plain RoPE's.
ROPE_KEYS = {
    "rope_theta": 10000.0,
    "rope_type": "default",
    "type": "default",
    "factor": 1.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "llama_4_scaling_beta": 0.0,
    "short_factor": 1.0,
    "long_factor": 1.0,
    "alpha": 1.0,
}
ROPE_FIELDS = ("rope_parameters", "rope_scaling")


def _give_rope_what_it_asks(config: dict[str, Any], args_class: type, exc: Exception) -> bool:
    """After a failed build: a RoPE dict where the model found None, or the key it missed; False if neither."""
    fields = [f.name for f in dataclasses.fields(args_class) if f.name in ROPE_FIELDS]
    if not fields:
        return False
    if isinstance(exc, (TypeError, AttributeError)) and "NoneType" in str(exc):
        missing = [f for f in fields if not config.get(f)]
        for f in missing:
            config[f] = {"rope_theta": ROPE_KEYS["rope_theta"], "type": "default", "rope_type": "default"}
        return bool(missing)
    key = exc.args[0] if isinstance(exc, KeyError) and exc.args else None
    if key in ROPE_KEYS and any(key not in (config.get(f) or {}) for f in fields):
        for f in fields:
            config[f] = {**(config.get(f) or {}), key: ROPE_KEYS[key]}
        return True
    return False


def _fill(args_class: type, model_type: str, fill_layers: bool = False) -> dict[str, Any]:
    config: dict[str, Any] = {"model_type": model_type}
    source = inspect.getsource(inspect.getmodule(args_class))
    for field in dataclasses.fields(args_class):
        if field.name == "model_type":
            continue
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        # A size whose default is empty (0, None, False) is a part the architecture leaves out: kept out.
        if field.name in RULES and (required or field.name not in OPTIONAL_PARTS or field.default not in (0, None, False)):
            config[field.name] = RULES[field.name]
        elif field.name in ALWAYS and not field.default:
            config[field.name] = ALWAYS[field.name]
        elif field.name == "text_config":
            continue
        elif required and field.name in LAYER_KIND_FIELDS:
            config[field.name] = _layer_kinds(field, source)
        elif required:
            config[field.name] = _required_value(field)
    kind_fields = [f for f in dataclasses.fields(args_class) if f.name in LAYER_KIND_FIELDS]
    if fill_layers and kind_fields and not any(config.get(f.name) or _default(f) for f in kind_fields):
        config[kind_fields[0].name] = _layer_kinds(kind_fields[0], source)
    for field in dataclasses.fields(args_class):
        if field.name.endswith("_idxs") and config.get(field.name) is None and not _default(field):
            config[field.name] = list(range(1, LAYERS, 2))  # indices of special layers: every second one
    config["tie_word_embeddings"] = config.get("tie_word_embeddings", False)
    return config


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _required_value(field: dataclasses.Field) -> Any:
    name = field.name
    for suffix, value in _REQUIRED_BY_SUFFIX:
        if name.endswith(suffix):
            return value
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    if kind.startswith("bool"):
        return False
    if kind.startswith("float"):
        return 1.0
    if kind.startswith("Optional") or "None" in kind:
        return None
    if kind.startswith("dict") or kind.startswith("Dict"):
        return {}
    raise NotTiny(f"required argument '{name}' ({kind}) has no default and no rule says what it is")


def _layer_kinds(field: dataclasses.Field, source: str) -> list[Any]:
    """One kind per layer, in turn: 0 and 1 for a list of ints, else the kind names the module's code tests for."""
    kinds: list[Any] = [0, 1] if "int" in str(field.type) else sorted({a or b for a, b in _KIND_LITERAL.findall(source)})
    try:  # the folder's config.json must also pass transformers' checks, as a real model's does
        from transformers.configuration_utils import ALLOWED_LAYER_TYPES

        kinds = [k for k in kinds if k in ALLOWED_LAYER_TYPES or isinstance(k, int)] or kinds
    except ImportError:
        pass
    if not kinds:
        raise NotTiny(f"required argument '{field.name}' lists layer kinds, and the module names none")
    return [kinds[i % len(kinds)] for i in range(LAYERS)]


def _text_config(module: types.ModuleType) -> dict[str, Any]:
    """A wrapper's text model config, from the arguments class it turns text_config into: an imported
    model module's, the text model of a wrapper it builds on, or a dataclass of its own named for text."""
    from mlx_lm.models.base import BaseModelArgs

    for value in vars(module).values():
        if inspect.ismodule(value) and value.__name__.startswith("mlx_lm.models.") and hasattr(value, "ModelArgs"):
            return _fill(value.ModelArgs, value.__name__.rsplit(".", 1)[-1])
    for value in vars(module).values():
        home = inspect.getmodule(value)
        if inspect.isclass(value) and home is not module and home.__name__.startswith("mlx_lm.models.") and hasattr(home, "ModelArgs"):
            if any(f.name == "text_config" for f in dataclasses.fields(home.ModelArgs)):
                return _text_config(home)
    candidates = [
        (key, value)
        for key, value in vars(module).items()
        if inspect.isclass(value) and dataclasses.is_dataclass(value) and value not in (module.ModelArgs, BaseModelArgs)
    ]
    # A class named for the text model first, then one imported from another model module.
    candidates.sort(key=lambda kv: ("Text" not in kv[0], kv[1].__module__ == module.__name__))
    if candidates and ("Text" in candidates[0][0] or candidates[0][1].__module__ != module.__name__):
        return _fill(candidates[0][1], module.__name__.rsplit(".", 1)[-1])
    raise NotTiny("it takes a text_config and names no text model's arguments")


# Integers that are not sizes: positions, bases, ids and limits keep their defaults.
_NOT_A_SIZE = re.compile(r"position|theta|base|ctx|length|max_|_ids?$|block_size|window|scale|seed|limit|topk|top_k")
SIZE_LIMIT = 1024


def _check_small(args: Any) -> None:
    """Refuses arguments that kept a real model's size in a field no rule shrank (it would not be tiny)."""
    for field in dataclasses.fields(args):
        value = getattr(args, field.name)
        if type(value) is int and value > SIZE_LIMIT and not _NOT_A_SIZE.search(field.name):
            raise NotTiny(f"'{field.name}' stays at {value}: no rule says what size it is")


def _model(config: dict[str, Any]) -> Any:
    """The model for `config`, once it has run a few tokens as mlx-lm runs them (else it is not a tiny model)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    args = args_class.from_dict(config)
    _check_small(args)
    model = model_class(args)
    mx.eval(model(mx.array([[1, 2, 3]]), cache=make_prompt_cache(model)))
    _check_transformers_accepts(config)
    return model


def _check_transformers_accepts(config: dict[str, Any]) -> None:
    """Loading the folder's tokenizer reads config.json through transformers, which checks some families' fields."""
    try:
        from huggingface_hub.errors import StrictDataclassClassValidationError
        from transformers import AutoConfig
    except ImportError:
        return
    try:
        AutoConfig.for_model(**config)
    except StrictDataclassClassValidationError as exc:
        raise NotTiny(f"transformers refuses the generated config: {str(exc).splitlines()[-1].strip()}") from None
    except (ValueError, KeyError):
        pass  # a family transformers does not know: it reads the folder without checking it


def build(config: dict[str, Any], seed: int = 0, scale: float = 1.0) -> Any:
    """mlx-lm's model for `config` with seeded random float32 weights, evaluated on this thread."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    mx.random.seed(seed)
    model = _model(config)
    params = [(k, v * scale if v.ndim == 2 else v) for k, v in tree_flatten(model.parameters())]
    model.update(tree_unflatten(params))
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    return model

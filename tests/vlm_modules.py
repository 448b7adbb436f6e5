"""The vision-language modules of the installed mlx-vlm, and a generic attempt at a tiny model of each.

A module is a vision-language model where mlx-vlm's loader would build one: its `ModelConfig` (the dataclass that
`mlx_vlm.utils.load` reads config.json into) has both a `vision_config` and a `text_config`. A module that does not
import is listed too, with why (as tests/tiny_configs.py lists mlx-lm's).

`tiny_model` fills the module's three config dataclasses the way tests/tiny_configs.py fills mlx-lm's ModelArgs:
tiny_configs' rules by field name for the text model, a few for the vision tower, the defaults elsewhere, and
`NotTiny` with the reason where a required field has no rule or the model does not build. It says whether the model
can be made at all; a tiny VLM the app can chat with also needs a tokenizer with the family's image tokens, a chat
template and the processor's configuration, written per family in tests/vlm_specs.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

from tests.tiny_configs import RULES, NotTiny, _check_small, _required_value

# The vision tower's sizes, by field name: one layer, images of 28 pixels in patches of 7.
VISION_RULES = {
    "hidden_size": 32, "embed_dim": 32, "width": 32, "intermediate_size": 48, "num_hidden_layers": 1, "depth": 1,
    "layers": 1, "num_layers": 1, "num_attention_heads": 2, "num_heads": 2, "num_key_value_heads": 2, "heads": 2,
    "head_dim": 16, "global_head_dim": 16, "image_size": 28, "patch_size": 7, "out_hidden_size": 64,
    "projection_dim": 32, "mlp_ratio": 1.5, "vocab_size": 384,
}
# More parameters than this: a part of the model kept a real one's size (the weights are made only once this passes).
PARAMETER_LIMIT = 2_000_000
_NAMES_VISION = re.compile("vision_config|VisionConfig")


def _import(name: str) -> Any:
    try:
        return importlib.import_module(f"mlx_vlm.models.{name}")
    except BaseException as exc:  # (some need a package mlx-vlm leaves optional: mlx-audio, opencv)
        raise NotTiny(f"it does not import: {type(exc).__name__}: {exc}") from None


def _fields(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def vlm_modules() -> list[str]:
    """Every module of the installed mlx-vlm whose ModelConfig holds a vision and a text config, or that does not
    import."""
    import mlx_vlm.models as models

    found = []
    for info in pkgutil.iter_modules(models.__path__):
        # (imported only where its code names a vision config: importing all of mlx-vlm's modules takes seconds)
        folder = Path(models.__path__[0]) / info.name
        if not info.ispkg or not any(_NAMES_VISION.search(f.read_text()) for f in folder.glob("*.py")):
            continue
        try:
            module = _import(info.name)
        except NotTiny:
            found.append(info.name)
            continue
        if {"vision_config", "text_config"} <= _fields(getattr(module, "ModelConfig", None)):
            found.append(info.name)
    return sorted(found)


def _fill(cls: Any, rules: dict[str, Any]) -> dict[str, Any]:
    """A dataclass's fields set by `rules` where they name them, required ones by tests/tiny_configs.py's rules for
    what a name says; the rest keep their defaults."""
    config: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if field.name in ("text_config", "vision_config"):
            continue
        if field.name == "model_type":
            if required or not field.default:  # (the module's own, as a folder's config.json names it)
                config[field.name] = cls.__module__.split(".")[2]
        elif field.name in rules:
            config[field.name] = rules[field.name]
        elif required:
            config[field.name] = _required_value(field)
    return config


def tiny_model(name: str) -> Any:
    """Module `name`'s Model, built from a generated tiny config; NotTiny with the reason where it cannot be."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    module = _import(name)
    try:
        text = module.TextConfig.from_dict(_fill(module.TextConfig, RULES))
        vision = module.VisionConfig.from_dict(_fill(module.VisionConfig, VISION_RULES))
        _check_small(text)
        _check_small(vision)
        config = module.ModelConfig.from_dict({**_fill(module.ModelConfig, {}), "text_config": {},
                                               "vision_config": {}})
        config.text_config, config.vision_config = text, vision
        model = module.Model(config)
    except NotTiny:
        raise
    except Exception as exc:
        raise NotTiny(f"its model does not build: {type(exc).__name__}: {exc}") from None
    # (the weights are not made until evaluated: a part no rule shrank is found by its size first)
    sizes = {k: v.size for k, v in tree_flatten(model.parameters())}
    if sum(sizes.values()) > PARAMETER_LIMIT:
        largest = max(sizes, key=sizes.get)
        raise NotTiny(f"its generated model is not tiny: {largest} holds {sizes[largest]} of its "
                      f"{sum(sizes.values())} parameters")
    mx.eval(model.parameters())
    return model

"""Settings values as TOML writes them, for messages and the example file; which fields are tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomli_w
from pydantic import BaseModel


def is_table(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def named_tables(annotation: Any) -> type[BaseModel] | None:
    """The model of the tables a field holds by name (`dict[str, Model]`: [table.NAME] each), else None."""
    args = getattr(annotation, "__args__", ())
    return args[1] if getattr(annotation, "__origin__", None) is dict and len(args) == 2 and is_table(args[1]) else None


def toml_value(value: Any) -> str:
    """`value` as it is written on the right of `key = ` in TOML (a table inline)."""
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):  # (on one line: tomli_w writes a line an item)
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()

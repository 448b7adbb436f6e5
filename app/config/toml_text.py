"""Settings values as TOML writes them, for messages and the example file; which fields are tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomli_w
from pydantic import BaseModel


def is_table(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def toml_value(value: Any) -> str:
    """`value` as it is written on the right of `key = ` in TOML (a table inline)."""
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()

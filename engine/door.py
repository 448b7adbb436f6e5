"""A package's door: its public names, each imported from its module on first use, not when the package is.

Used by mlxchat.engine (the app's door) and mlxchat.engine.bench (the bench command's): on Linux the CLI loads its
BLAS before anything imports mlx.core, so importing a door must not import the modules behind it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_names(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of `package`, whose public `names` map to "module" or
    "module:name" (where the module calls it otherwise)."""

    def getattr_(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = names[name].partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        vars(sys.modules[package])[name] = value  # later lookups skip this function
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return getattr_, dir_

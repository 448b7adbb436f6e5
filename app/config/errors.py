"""How a refused setting is worded: which source gave the bad value, what it must be, what was meant."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from mlxchat.app.config.toml_text import is_table, toml_value
from mlxchat.app.config.settings import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings


def _describe(
    err: Any, flags: Mapping[str, Any], env: Mapping[str, Any], file: Mapping[str, Any], file_label: str
) -> str:
    """One validation error as the user should read it, naming where the bad value came from."""
    loc = tuple(str(part) for part in err["loc"])
    dotted = ".".join(loc)
    if err["type"] == "extra_forbidden":
        where = "--" + dotted.replace("_", "-") if _has(flags, loc) else file_label
        return f"{where}: unknown key `{dotted}` ({_suggest(loc)})"
    reason = _reason(err)
    if _has(flags, loc):
        return f"--{dotted.replace('_', '-')} {_get(flags, loc)} is not allowed: {reason}"
    if _has(env, loc):
        var = ENV_PREFIX + ENV_NESTED_DELIMITER.join(loc).upper()
        return f"environment: {var}={_get(env, loc)} is not allowed: {reason}"
    if _has(file, loc):
        return f"{file_label}: {dotted} = {toml_value(_get(file, loc))} is not allowed: {reason}"
    return f"{dotted}: {reason}"


def _reason(err: Any) -> str:
    """What the value must be, from a pydantic error."""
    ctx = err.get("ctx", {})
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("more than", "gt"),
        "less_than": ("less than", "lt"),
    }
    if err["type"] in bounds:
        words, key = bounds[err["type"]]
        return f"must be {words} {ctx[key]}"
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return "must be a table"
    if err["type"] == "value_error":
        return str(ctx["error"])
    return str(err["msg"]).replace("Input should be", "must be")


def _suggest(loc: tuple[str, ...]) -> str:
    """'did you mean `x`?' for a misspelt key, else the keys allowed where it stands."""
    model: type[BaseModel] = Settings
    for part in loc[:-1]:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if not is_table(annotation):
            break
        model = annotation
    known = list(model.model_fields)
    close = difflib.get_close_matches(loc[-1], known, n=1)
    prefix = ".".join(loc[:-1]) + "." if len(loc) > 1 else ""
    if close:
        return f"did you mean `{prefix}{close[0]}`?"
    return "allowed: " + ", ".join(prefix + key for key in known)


def _has(data: Mapping[str, Any], loc: tuple[str, ...]) -> bool:
    for part in loc:
        if not isinstance(data, Mapping) or part not in data:
            return False
        data = data[part]
    return True


def _get(data: Mapping[str, Any], loc: tuple[str, ...]) -> Any:
    for part in loc:
        data = data[part]
    return data

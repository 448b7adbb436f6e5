"""Reading and writing settings: defaults < config.toml < MLXCHAT_* environment < flags, every refusal worded once."""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import ValidationError
from pydantic_settings import EnvSettingsSource, SettingsError

from mlxchat.app.config.errors import _describe
from mlxchat.app.config.settings import (
    _LAYERS,
    CONFIG_ENV_VAR,
    ENV_NESTED_DELIMITER,
    ENV_PREFIX,
    ConfigError,
    Settings,
    _Layers,
    settings_problems,
)
from mlxchat.app.paths import default_config_path
from mlxchat.engine import plan_slots


def resolve_config_path(config_path: Path | None) -> tuple[Path, bool]:
    """The config file to use and whether the user named it (--config or MLXCHAT_CONFIG)."""
    if config_path is not None:
        return Path(config_path).expanduser(), True
    if os.environ.get(CONFIG_ENV_VAR):
        return Path(os.environ[CONFIG_ENV_VAR]).expanduser(), True
    return default_config_path(), False


def load_settings(config_path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Builds the Settings from defaults, the config file, the environment and `overrides` (flags).

    `overrides` holds only the values the user gave, keyed like the fields (nested for
    [sampling]). Raises ConfigError with a message fit to show as it is.
    """
    path, named = resolve_config_path(config_path)
    if not path.exists():
        if named:
            raise ConfigError(f"{path}: config file not found")
        file_data: dict[str, Any] = {}
    else:
        file_data = _read_toml(path)
    flags = dict(overrides or {})
    settings = _build(_Layers(file=file_data), flags, str(path))
    settings._config_file = path
    return settings


def save_settings(updates: Mapping[str, Any], path: Path) -> None:
    """Writes `updates` into the config file at `path`, keeping the user's other keys.

    A value of None removes the key (TOML has no null). The result is validated first, so a
    bad update raises ConfigError and leaves the file as it was; the write is atomic. Comments
    in the file are not kept.
    """
    path = Path(path)
    data = _read_toml(path) if path.exists() else {}
    merged = _merge(data, updates)
    _build(_Layers(file=merged, env=False), {}, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            tomli_w.dump(merged, out)
            out.flush()
            os.fsync(out.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def keep_settings(settings: Settings, updates: Mapping[str, Any]) -> tuple[Settings, Path]:
    """The one rule for settings the app keeps as it is used (the theme, the timings, the model, the slots): `updates`
    written to the config file `settings` came from (else the default one), for the next start, and `settings` with
    them returned, which the app runs on from then, with the file. ConfigError or OSError say why they were not
    written (then nothing changed)."""
    path = settings.config_file or default_config_path()
    save_settings(updates, path)
    return settings.model_copy(update=dict(updates)), path


@contextmanager
def _layers(layers: _Layers) -> Iterator[None]:
    token = _LAYERS.set(layers)
    try:
        yield
    finally:
        _LAYERS.reset(token)


def _build(layers: _Layers, flags: dict[str, Any], file_label: str) -> Settings:
    """Constructs Settings from these sources, turning any failure, or any refusal, into one ConfigError."""
    try:
        with _layers(layers):
            settings = Settings(**flags)
    except SettingsError as exc:
        # Only the environment source parses text on its own (JSON for a whole table).
        raise ConfigError(f"environment: {exc}") from None
    except ValidationError as exc:
        env = EnvSettingsSource(Settings)() if layers.env else {}
        problems = [_describe(err, flags, env, layers.file, file_label) for err in exc.errors()]
        raise ConfigError("\n".join(problems)) from None
    env = EnvSettingsSource(Settings)() if layers.env else {}
    # Later sources win: the file, then the environment, then the flags.
    settings._origins = {
        **{key: file_label for key in _dotted(layers.file)},
        **{key: ENV_PREFIX + key.replace(".", ENV_NESTED_DELIMITER).upper() for key in _dotted(env)},
        **{key: "--" + key.replace("_", "-") for key in _dotted(flags)},
    }
    # A contradiction also spoils the plan: one message is enough.
    problems = settings_problems(settings) or _plan_problems(settings)
    if problems:
        raise ConfigError("\n".join(problems))
    return settings


def _plan_problems(settings: Settings) -> list[str]:
    """The slot plan's errors that no model can lift (too few tokens per slot), with the keys that chose it."""
    request = settings.slot_request()
    plan = plan_slots(request, trained_ctx=None, kv_bytes_per_token=0)
    keys = [key for key in ("ctx_size", "ctx_per_slot", "parallel", "per_slot_min") if getattr(request, key) is not None]
    described = [settings.described(key) for key in keys]
    chosen = ", ".join(described[:-1]) + " and " + described[-1]
    return [f"{chosen}: {error}" for error in plan.errors]


def _dotted(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of the values in `data`, descending into tables."""
    keys: list[str] = []
    for key, value in data.items():
        keys += _dotted(value, f"{prefix}{key}.") if isinstance(value, Mapping) and value else [prefix + key]
    return keys


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed config file; ConfigError (with line and column) when it cannot be read or parsed."""
    # Opening a FIFO would wait for a writer forever, and a directory cannot be read: refuse both first.
    if path.exists() and not path.is_file():
        raise ConfigError(
            f"{path}: the config file is not a regular file: name a TOML file with --config or {CONFIG_ENV_VAR}"
        )
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: the config file is not UTF-8 text (byte {exc.start}): save it as UTF-8 text"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None


def _merge(base: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `updates` applied recursively; a None value removes the key."""
    merged = dict(base)
    for key, value in updates.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = _merge({}, value) if isinstance(value, Mapping) else value
    return merged

"""Settings for mlxchat: defaults < config.toml < MLXCHAT_* environment < command-line flags.

`python -m app.config > config.example.toml` regenerates the example config from the
field docstrings and defaults below.
"""

from __future__ import annotations

import difflib
import os
import tempfile
import textwrap
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

ENV_PREFIX = "MLXCHAT_"
ENV_NESTED_DELIMITER = "__"
CONFIG_ENV_VAR = "MLXCHAT_CONFIG"

WeightsDtype = Literal["auto", "float32", "float16", "bfloat16", "keep"]


class ConfigError(Exception):
    """A configuration the user must fix; the message names the file or variable, the key and what is allowed."""


class Sampling(BaseModel):
    """How the next token is chosen: the [sampling] table."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    temperature: float = Field(0.7, ge=0)
    """Sampling temperature: 0 is greedy (always the most likely token), higher gives more varied replies."""

    top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus sampling: draw only from the most likely tokens whose probabilities add up to top_p (1 turns it off)."""

    top_k: int = Field(40, ge=0)
    """Draw only from the top_k most likely tokens (0 turns it off)."""

    max_tokens: int = Field(1024, ge=1)
    """The most tokens one reply may have; a reply also stops at the end of its slot's context."""

    seed: int | None = Field(None, ge=0, examples=[42])
    """Random seed for sampling, for replies that repeat run after run. Unset: a new seed each run."""


@dataclass(frozen=True)
class _Layers:
    """Which sources a Settings construction reads besides its keyword arguments."""

    file: Mapping[str, Any] = field(default_factory=dict)
    env: bool = True


# pydantic-settings builds its sources in a classmethod with no per-call arguments, so the
# parsed file (and whether the environment counts) reaches it through this variable.
_LAYERS: ContextVar[_Layers] = ContextVar("mlxchat_settings_layers", default=_Layers())


class Settings(BaseSettings):
    """Everything mlxchat can be configured with; each field's docstring is its documentation."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    model: str | None = Field(None, examples=["~/models/SmolLM2-360M-Instruct.Q8_0.gguf"])
    """The model to chat with: a local MLX model folder, a Hugging Face repo id (fetched once,
    which needs the network) or a .gguf file (llama architecture, converted once into the cache).
    Unset: the embedded SmolLM2-135M-Instruct."""

    ctx_size: int = Field(8192, ge=1)
    """Total context in tokens, shared by all slots as in llama.cpp: each slot gets
    ctx_size / parallel. When only ctx_per_slot is set, the total is parallel x ctx_per_slot."""

    parallel: int = Field(4, ge=1)
    """Number of slots: chats that can generate at the same time. Above parallel_max it is
    clamped, and the clamp is reported."""

    parallel_max: int = Field(8, ge=1)
    """The most slots parallel may ask for."""

    ctx_per_slot: int | None = Field(None, ge=1, examples=[2048])
    """Context per slot in tokens, as llama.cpp's --ctx-per-slot. Alone, the total becomes
    parallel x ctx_per_slot; with ctx_size, each slot gets the smaller of ctx_per_slot and
    ctx_size / parallel."""

    per_slot_floor: int = Field(1024, ge=1)
    """Below this many tokens per slot mlxchat warns that a system prompt and a few turns may no
    longer fit; the configuration is still allowed."""

    per_slot_min: int = Field(256, ge=1)
    """Below this many tokens per slot the configuration is refused."""

    weights_dtype: WeightsDtype = "auto"
    """How the weights are held in memory: "auto" (float32 on a CPU, where batching is cheap
    with an optimized BLAS; as stored on Metal and CUDA), "float32", "float16", "bfloat16", or
    "keep" (as stored, quantized included)."""

    blas: str = Field("auto", min_length=1)
    """Linux CPU only: the BLAS library MLX multiplies matrices with. "auto" prefers Intel MKL
    installed in this environment, then the system's OpenBLAS; a path loads that library; "off"
    keeps MLX's bundled reference BLAS, which is several times slower."""

    theme: str = Field("mlxchat-dark", min_length=1)
    """The colour theme of the interface."""

    system_prompt: str = ""
    """The system message each new chat starts with (empty: none)."""

    sampling: Sampling = Field(default_factory=Sampling)
    """How the next token is chosen."""

    keys: dict[str, str] = Field(default_factory=dict, examples=[{"new_chat": "ctrl+t", "toggle_grid": "f6"}])
    """Keys remapped by action id (the ids are listed in the help screen, F1): a key, or several
    separated by commas."""

    @field_validator("keys")
    @classmethod
    def _known_actions(cls, keys: dict[str, str]) -> dict[str, str]:
        from app.keys import ACTIONS  # Textual loads only once a keymap is given

        known = {a.id for a in ACTIONS}
        unknown = sorted(set(keys) - known)
        if unknown:
            raise ValueError(f"no action is called {', '.join(unknown)}; the actions are: {', '.join(sorted(known))}")
        return keys

    _config_file: Path | None = PrivateAttr(None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Orders the sources, first wins: flags (keyword arguments), environment, config file."""
        layers = _LAYERS.get()
        env = (env_settings,) if layers.env else ()
        return (init_settings, *env, InitSettingsSource(settings_cls, dict(layers.file)))

    @property
    def config_file(self) -> Path | None:
        """The config file these settings were loaded from, where saving writes to."""
        return self._config_file

    def slot_request(self) -> dict[str, int | None]:
        """The slot settings as engine.slot_plan.evaluate_slots takes them.

        ctx_size is None unless the user set it, so that ctx_per_slot alone means
        parallel x ctx_per_slot rather than being capped by the default total.
        """
        return {
            "parallel": self.parallel,
            "ctx_size": self.ctx_size if "ctx_size" in self.model_fields_set else None,
            "ctx_per_slot": self.ctx_per_slot,
            "parallel_max": self.parallel_max,
            "per_slot_floor": self.per_slot_floor,
            "per_slot_min": self.per_slot_min,
        }


def xdg_dir(variable: str, default: str) -> Path:
    """An XDG base directory: `variable`'s value, else `default` under the home directory."""
    xdg = os.environ.get(variable, "")
    # The XDG spec says to ignore an empty or relative value.
    return Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / default


def default_config_path() -> Path:
    """Where the user's config file lives: $XDG_CONFIG_HOME/mlxchat/config.toml, else ~/.config."""
    return xdg_dir("XDG_CONFIG_HOME", ".config") / "mlxchat" / "config.toml"


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


def example_config() -> str:
    """The text of config.example.toml: every key, commented out, with its documentation and default."""
    lines = [
        "# mlxchat configuration.",
        "#",
        "# Copy to ~/.config/mlxchat/config.toml (or $XDG_CONFIG_HOME/mlxchat/config.toml, or name it",
        "# with --config / MLXCHAT_CONFIG) and uncomment what you want to change. Environment",
        "# variables override the file: MLXCHAT_PARALLEL=2, MLXCHAT_SAMPLING__TEMPERATURE=0.",
        "# Command-line flags override both.",
        "#",
        "# Generated from app/config.py by: python -m app.config > config.example.toml",
        "",
    ]
    lines += _example_fields(Settings)
    for name, info in Settings.model_fields.items():
        if _is_table(info.annotation):
            lines += [*_comment(info.description or ""), f"[{name}]", ""]
            lines += _example_fields(info.annotation)
    return "\n".join(lines).rstrip("\n") + "\n"


def _example_fields(model: type[BaseModel]) -> list[str]:
    """The commented documentation and `# key = value` line of each scalar field of `model`."""
    lines: list[str] = []
    for name, info in model.model_fields.items():
        if _is_table(info.annotation):
            continue
        value = info.examples[0] if info.examples else info.default
        lines += [*_comment(info.description or ""), f"# {name} = {_toml_value(value)}", ""]
    return lines


def _comment(text: str) -> list[str]:
    """`text` wrapped as TOML comment lines."""
    return ["# " + line for line in textwrap.wrap(" ".join(text.split()), width=90)]


def _is_table(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _toml_value(value: Any) -> str:
    """`value` as it is written on the right of `key = ` in TOML (a table inline)."""
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


@contextmanager
def _layers(layers: _Layers) -> Iterator[None]:
    token = _LAYERS.set(layers)
    try:
        yield
    finally:
        _LAYERS.reset(token)


def _build(layers: _Layers, flags: dict[str, Any], file_label: str) -> Settings:
    """Constructs Settings from these sources, turning any failure into one ConfigError."""
    try:
        with _layers(layers):
            return Settings(**flags)
    except SettingsError as exc:
        # Only the environment source parses text on its own (JSON for a whole table).
        raise ConfigError(f"environment: {exc}") from None
    except ValidationError as exc:
        env = EnvSettingsSource(Settings)() if layers.env else {}
        problems = [_describe(err, flags, env, layers.file, file_label) for err in exc.errors()]
        raise ConfigError("\n".join(problems)) from None


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
        return f"{file_label}: {dotted} = {_toml_value(_get(file, loc))} is not allowed: {reason}"
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
        if not _is_table(annotation):
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


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed config file; ConfigError (with line and column) when it cannot be read or parsed."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
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


if __name__ == "__main__":
    print(example_config(), end="")

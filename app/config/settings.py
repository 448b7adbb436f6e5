"""Settings for mlxchat: defaults < config.toml < MLXCHAT_* environment < command-line flags.

`python -m mlxchat.app.config.settings > config.example.toml` regenerates the example config from the
field docstrings and defaults below.
"""

from __future__ import annotations

import dataclasses
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

from mlxchat.app.actions import ACTIONS
from mlxchat.app.config.limits import (
    CONTEXT_CEILING,
    SEED_CEILING,
    SLOT_CEILING,
    VOCAB_CEILING,
    model_limits,
    out_of_order,
)
from mlxchat.app.paths import default_config_path
from mlxchat.engine.events import SamplingParams
from mlxchat.engine.memory import DEFAULT_PARK_BUDGET_MB
from mlxchat.engine.plan import SlotRequest, plan_slots

ENV_PREFIX = "MLXCHAT_"
ENV_NESTED_DELIMITER = "__"
CONFIG_ENV_VAR = "MLXCHAT_CONFIG"

WeightsDtype = Literal["auto", "float32", "float16", "bfloat16", "keep"]
EngineKind = Literal["local", "remote"]
# Linux: the local engine's threads run at this nice value, so the UI thread takes a core from them
# as soon as it wakes (engine.cpu.priority): measured with `mlxchat bench --ui`, see the README.
DEFAULT_ENGINE_NICE = 10


class ConfigError(Exception):
    """A configuration the user must fix; the message names the file or variable, the key and what is allowed."""


class Sampling(BaseModel):
    """How the next token is chosen: the [sampling] table."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    temperature: float = Field(0.7, ge=0)
    """Sampling temperature: 0 is greedy (always the most likely token), higher gives more varied replies."""

    top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus sampling: draw only from the most likely tokens whose probabilities add up to top_p (1 turns it off)."""

    top_k: int = Field(40, ge=0, le=VOCAB_CEILING)
    """Draw only from the top_k most likely tokens (0 turns it off)."""

    max_tokens: int = Field(1024, ge=1, le=CONTEXT_CEILING)
    """The most tokens one reply may have; a reply also stops at the end of its slot's context."""

    seed: int | None = Field(None, ge=0, le=SEED_CEILING, examples=[42])
    """Random seed for sampling, for replies that repeat run after run. Unset: a new seed each run."""

    def params(self) -> SamplingParams:
        """The engine's sampling type for these values: the one conversion between the two."""
        return SamplingParams(**self.model_dump())


class Remote(BaseModel):
    """The OpenAI-compatible server that `engine = "remote"` chats through: the [remote] table."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    base_url: str = Field("http://127.0.0.1:8080", min_length=1)
    """The server's address (llama-server, vLLM, mlx_lm.server, Ollama...); the OpenAI API is
    under its /v1, which may be given or left out."""

    model: str | None = Field(None, examples=["qwen2.5-7b-instruct"])
    """The model to ask the server for. Unset: the first model the server lists at /v1/models."""

    timeout: float = Field(60.0, gt=0)
    """Seconds to wait for the server to connect or to send the next part of a reply before the
    reply ends with an error (a reply that keeps streaming may take longer in all)."""

    api_key_env: str | None = Field(None, examples=["OPENAI_API_KEY"])
    """The name of the environment variable that holds the server's API key (the key itself is
    never written in this file). Unset: no key is sent."""


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
        allow_inf_nan=False,
        use_attribute_docstrings=True,
        validate_default=True,
    )

    model: str | None = Field(None, examples=["~/models/SmolLM2-360M-Instruct.Q8_0.gguf"])
    """The model to chat with: a local MLX model folder, a Hugging Face repo id (fetched once,
    which needs the network) or a .gguf file (llama architecture, converted once into the cache).
    Unset: the embedded SmolLM2-135M-Instruct."""

    ctx_size: int = Field(8192, ge=1, le=CONTEXT_CEILING)
    """Total context in tokens, shared by all slots as in llama.cpp: each slot gets
    ctx_size / parallel. When only ctx_per_slot is set, the total is parallel x ctx_per_slot."""

    parallel: int = Field(4, ge=1, le=SLOT_CEILING)
    """Number of slots: chats that can generate at the same time. Above parallel_max it is
    clamped, and the clamp is reported."""

    parallel_max: int = Field(8, ge=1, le=SLOT_CEILING)
    """The most slots parallel may ask for."""

    ctx_per_slot: int | None = Field(None, ge=1, le=CONTEXT_CEILING, examples=[2048])
    """Context per slot in tokens, as llama.cpp's --ctx-per-slot. Alone, the total becomes
    parallel x ctx_per_slot; with ctx_size, each slot gets the smaller of ctx_per_slot and
    ctx_size / parallel."""

    per_slot_floor: int = Field(1024, ge=1, le=CONTEXT_CEILING)
    """Below this many tokens per slot mlxchat warns that a system prompt and a few turns may no
    longer fit; the configuration is still allowed."""

    per_slot_min: int = Field(256, ge=1, le=CONTEXT_CEILING)
    """Below this many tokens per slot the configuration is refused."""

    park_budget_mb: int = Field(DEFAULT_PARK_BUDGET_MB, ge=0, le=1 << 20)
    """Memory in MiB for the KV of chats that lost their slot to another chat, kept so that coming
    back to one does not prefill its history again; past it the least recently parked go first
    (the chat then says its history was prefilled again). 1024 holds about 23,000 tokens of the
    default model in float32 (45 KiB each), 8,000 of an 8B model with grouped-query attention
    in float16. 0 turns parking off."""

    weights_dtype: WeightsDtype = "auto"
    """How the weights are held in memory: "auto" (float32 on a CPU, where batching is cheap
    with an optimized BLAS; as stored on Metal and CUDA), "float32", "float16", "bfloat16", or
    "keep" (as stored, quantized included)."""

    blas: str = Field("auto", min_length=1)
    """Linux CPU only: the BLAS library MLX multiplies matrices with. "auto" prefers Intel MKL
    installed in this environment, then the system's OpenBLAS; a path loads that library; "off"
    keeps MLX's bundled reference BLAS, which is several times slower."""

    engine_nice: int = Field(DEFAULT_ENGINE_NICE, ge=0, le=19)
    """Linux only: the nice value (0-19) the local engine's threads run at. Above the interface's
    0, the interface takes a core from the engine as soon as it has work (a key press, a screen
    update), which keeps typing quick while chats generate on the CPU; the engine loses nothing
    while the interface is idle, but other programs wanting the CPU come before it too. 0: the
    engine runs at the interface's priority."""

    exact: bool = True
    """CUDA only: multiply float32 in full float32 (MLX_ENABLE_TF32=0), so that a float32 model's
    batched replies are the same as each prompt's alone. false lets MLX use TF32, faster but
    rounded: batched and solo replies can then differ, as half-precision ones on a GPU can
    anyway. CPUs and Metal always multiply float32 in full."""

    theme: str = Field("mlxchat-dark", min_length=1)
    """The colour theme of the interface."""

    system_prompt: str = ""
    """The system message each new chat starts with (empty: none)."""

    engine: EngineKind = "local"
    """Where the model runs: "local" (in this process, with MLX) or "remote" (an OpenAI-compatible
    server, set in [remote]; the model, context and slots are then the server's)."""

    sampling: Sampling = Field(default_factory=Sampling)
    """How the next token is chosen."""

    remote: Remote = Field(default_factory=Remote)
    """The server used when engine = "remote"."""

    keys: dict[str, str] = Field(default_factory=dict, examples=[{"new_chat": "ctrl+t", "toggle_grid": "f6"}])
    """Keys remapped by action id (the ids are listed in the help screen, F1): a key, or several
    separated by commas."""

    @field_validator("keys")
    @classmethod
    def _known_actions(cls, keys: dict[str, str]) -> dict[str, str]:
        known = {a.id for a in ACTIONS}
        unknown = sorted(set(keys) - known)
        if unknown:
            raise ValueError(f"no action is called {', '.join(unknown)}; the actions are: {', '.join(sorted(known))}")
        return keys

    _config_file: Path | None = PrivateAttr(None)
    # Where each value the user gave came from (dotted key -> flag, variable or file), for messages.
    _origins: dict[str, str] = PrivateAttr(default_factory=dict)

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

    def origin(self, key: str) -> str:
        """Where the value of `key` (dotted inside a table) came from: its flag, variable or file, or "default"."""
        return self._origins.get(key, "default")

    def described(self, key: str) -> str:
        """`key = value (origin)`, as messages name a setting."""
        value: Any = self
        for part in key.split("."):
            value = getattr(value, part)
        return f"{key} = {_toml_value(value)} ({self.origin(key)})"

    def updated(self, values: Mapping[str, Any], origin: str) -> Settings:
        """A copy with `values` (already valid one by one) set as given by `origin`, e.g. a screen."""
        copy = self.model_copy(update=dict(values))
        copy._origins = {**self._origins, **{key: origin for key in values}}
        return copy

    def slot_request(self) -> SlotRequest:
        """The slot settings as mlxchat.engine.plan.plan_slots takes them.

        ctx_size is None unless the user set it, so that ctx_per_slot alone means
        parallel x ctx_per_slot rather than being capped by the default total.
        """
        return SlotRequest(
            parallel=self.parallel,
            ctx_size=self.ctx_size if "ctx_size" in self.model_fields_set else None,
            ctx_per_slot=self.ctx_per_slot,
            parallel_max=self.parallel_max,
            per_slot_floor=self.per_slot_floor,
            per_slot_min=self.per_slot_min,
        )


def refusals(settings: Settings, trained_ctx: int | None = None) -> list[str]:
    """Why `settings` cannot run, one message per problem, naming the keys, their origin and what to change.

    Settings that contradict each other and, given the model's trained context, sizes the model can
    never use. The slot plan's own errors come from evaluating it (mlxchat.engine.plan).
    """
    values = dataclasses.asdict(settings.slot_request())
    problems = [
        f"{settings.described(low)} is more than {settings.described(high)}: lower {low} or raise {high}"
        for low, high in out_of_order(values)
    ]
    problems += [
        f"{settings.described(key)} is more than the model can use: {why}"
        for key, why in model_limits(values, trained_ctx)
    ]
    return problems


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
        "# Generated from app/config/settings.py by: python -m mlxchat.app.config.settings > config.example.toml",
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
    problems = refusals(settings) or _plan_refusals(settings)
    if problems:
        raise ConfigError("\n".join(problems))
    return settings


def _plan_refusals(settings: Settings) -> list[str]:
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


if __name__ == "__main__":
    print(example_config(), end="")

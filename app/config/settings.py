"""Settings for mlxchat: defaults < config.toml < MLXCHAT_* environment < command-line flags.

Each field's docstring is its documentation: `python -m mlxchat.app.config.example > config.example.toml`
regenerates the example config from them. Loading and saving: app.config.loading; error wording: app.config.errors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from mlxchat.app.actions import ACTIONS, key_clashes
from mlxchat.app.config.mcp import Mcp
from mlxchat.app.config.toml_text import toml_value
from mlxchat.app.config.limits import (
    CONTEXT_CEILING,
    SEED_CEILING,
    SLOT_CEILING,
    VOCAB_CEILING,
    model_limits,
    out_of_order,
)
from mlxchat.engine import DEFAULT_DISK_KV_MB, DEFAULT_PARK_BUDGET_MB, SamplingParams, SlotRequest, STALL

ENV_PREFIX = "MLXCHAT_"
ENV_NESTED_DELIMITER = "__"
CONFIG_ENV_VAR = "MLXCHAT_CONFIG"

WeightsDtype = Literal["auto", "float32", "float16", "bfloat16", "keep"]
KVDtype = Literal["auto", "float32", "float16", "bfloat16", "q8"]  # engine.kv.kv_types.KV_DTYPES
EngineKind = Literal["local", "remote"]
PicturesWay = Literal["auto", "blocks", "off"]  # app.ui.pictures
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

    thinking: bool = True
    """For models that reason and whose chat template has a thinking switch (Qwen 3, GLM...): whether they
    think before they answer. false asks for the answer alone (each chat can change it in F5)."""

    reasoning_budget: int | None = Field(None, ge=0, le=CONTEXT_CEILING, examples=[1024])
    """The most tokens a reply may reason with: at the budget the engine ends the reasoning (it writes the
    model's end-of-reasoning marker) and the answer follows, as llama.cpp's --reasoning-budget. Unset: no cap."""

    speculative: Literal["off", "lookup", "draft"] = "off"
    """Speculative decoding: "lookup" drafts the next tokens from the chat's own text (its attachments, earlier
    turns and the reply so far), "draft" has the draft model (`draft_model`) draft them; either way they are
    checked in the batched pass, so a reply comes several tokens a pass where the drafts are right. The reply is
    the same, token for token, as without it (greedy and seeded) where the pass is batch-invariant (`mlxchat
    doctor` says); models with sliding windows shorter than a slot or recurrent layers do not speculate. "off":
    one token a pass (each chat chooses its own in F5)."""

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
    (the chat then says its history was prefilled again). 1024 holds about 46,000 tokens of the
    default model with its K/V in float16 (22.5 KiB each), 8,000 of an 8B model with grouped-query
    attention in float16. 0 turns parking off."""

    disk_kv_mb: int = Field(DEFAULT_DISK_KV_MB, ge=0, le=1 << 24)
    """Disk space in MiB for saved KV: each chat's KV is also written under the cache folder when it
    is parked, closed or the app quits, so that a chat reopened later, even after a restart, reads
    it back instead of prefilling its history again. Past it the least recently used files go
    first. 0 turns it off."""

    prefill_stall: float = Field(STALL, ge=1.1, le=20.0)
    """While other chats stream, a new prompt is read in chunks, so that their steps take on average at
    most this many times as long as without it (their tokens and the chunk share a pass where the
    model allows; a step with a chunk may take about 6 times, the next ones go without). Higher: the
    prompt's first token comes sooner, and the other chats slow down more."""

    weights_dtype: WeightsDtype = "auto"
    """How the weights are held in memory: "auto" (on a CPU, 4- and 8-bit, float16 and bfloat16
    layers kept as stored and multiplied by mlxchat's compiled kernels, everything else float32;
    float32 where the kernels are not built; as stored on Metal and CUDA), "float32", "float16",
    "bfloat16", or "keep" (as stored, quantized included)."""

    kv_dtype: KVDtype = "auto"
    """How the slots store each token's keys and values (the KV cache): "float32"; "float16" or
    "bfloat16" (half of float32's bytes); "q8" (a byte a value with a scale and a bias per group of 64
    or 32 values: 0.28 of float32's bytes; heads whose size 32 does not divide are refused). "auto":
    float16 on a CPU where mlxchat's attention kernel runs (on the default model it agrees with a
    float64 reference as often as float32 does, and reads faster); elsewhere as the model computes
    them (Metal, CUDA). `mlxchat bench --scenario kv` measures each type on your model; the slots
    screen (F2) and `mlxchat doctor` count the bytes of the type in use."""

    int8_activations: bool = False
    """CPU only, 4- and 8-bit models: the layers multiply the activations rounded to 8-bit integers in blocks
    of 32 values, as llama.cpp does, instead of float32. With AVX-512 VNNI, on the default model 1.0-1.08x as
    fast with one chat and 1.0-1.05x with 8 or 16 (Intel Xeon, 2 cores: float rows have AVX-512 loops of their
    own); with AVX2 only, 1.1-1.2x with one chat but slower with several and for prompts (measured on the same
    Xeon). Replies no longer equal the float32
    model's word for word, though batched ones still equal each prompt's alone; `mlxchat bench --scenario kv`
    shows how often the next token agrees with a float64 reference either way."""

    draft_model: str | None = Field(None, examples=["~/models/SmolLM2-135M-Instruct.Q8_0.gguf"])
    """A smaller model that drafts for the chats with speculative = "draft", given as `model` is and loaded
    with it: it proposes the next tokens, the model checks them, and replies stay the same token for token.
    It must have the model's tokenizer (a smaller model of its family): another vocabulary is refused at start.
    Its weights and its own K/V (a slot's length for every slot) count in the memory check. Unset: none."""

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

    show_timings: bool = False
    """Whether each reply shows its timings line (prompt, cache hits, first token, speed); alt+t switches it,
    and the choice is kept here."""

    pictures: PicturesWay = "auto"
    """How an image sent in a chat is drawn under its message: "auto" draws it where the terminal draws pictures
    (kitty's graphics protocol, or sixel), elsewhere (tmux, most terminals) the message's line for it stands alone;
    "blocks" draws it there too, in coloured half blocks (any terminal with true colour, tmux included); "off"
    never draws it (nor asks the terminal at start)."""

    confirm_quit: bool = True
    """Whether quitting while replies are being written asks first (what they wrote is kept either way)."""

    system_prompt: str = ""
    """The system message each new chat starts with (empty: none)."""

    keep_reasoning: bool = False
    """Whether a chat's later turns send its replies' reasoning back to the model (as `reasoning_content`,
    which the templates that render past reasoning read). false sends the answers only, which most
    templates expect; the reasoning is kept in the chat and its exports either way."""

    attach_max_kb: int = Field(512, ge=1, le=1 << 20)
    """The largest file, in KiB, that `@` attaches to a message (its text goes to the model whole, and must fit
    the chat's slot as well)."""

    engine: EngineKind = "local"
    """Where the model runs: "local" (in this process, with MLX) or "remote" (an OpenAI-compatible
    server, set in [remote]; the model, context and slots are then the server's)."""

    sampling: Sampling = Field(default_factory=Sampling)
    """How the next token is chosen."""

    mcp: Mcp = Field(default_factory=Mcp)
    """Tools the chats may call, from Model Context Protocol servers."""

    remote: Remote = Field(default_factory=Remote)
    """The server used when engine = "remote"."""

    keys: dict[str, str] = Field(default_factory=dict, examples=[{"new_chat": "ctrl+t", "toggle_grid": "f10"}])
    """Keys remapped by action id (the ids are listed in the help screen, F1): a key, or several
    separated by commas."""

    @field_validator("keys")
    @classmethod
    def _known_actions(cls, keys: dict[str, str]) -> dict[str, str]:
        known = {a.id for a in ACTIONS}
        unknown = sorted(set(keys) - known)
        if unknown:
            raise ValueError(f"no action is called {', '.join(unknown)}; the actions are: {', '.join(sorted(known))}")
        clashes = key_clashes(keys)
        if clashes:
            raise ValueError("; ".join(f"{key} would be the key of both {a} and {b}" for key, a, b in clashes)
                             + ": give one of them another key (F1 lists every action's keys)")
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
        return f"{key} = {toml_value(value)} ({self.origin(key)})"

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


def settings_problems(settings: Settings, trained_ctx: int | None = None) -> list[str]:
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
    if settings.sampling.speculative == "draft" and not settings.draft_model:
        problems.append(f'{settings.described("sampling.speculative")} and no draft_model is set: set draft_model '
                        'to a smaller model with the same tokenizer, or speculative to "lookup"')
    return problems

"""What an OpenAI-compatible server says about itself: models, context, and llama-server's slots.

Every request goes through the `openai` client, so a failure is always one of its exceptions and
`describe_error` can put any of them in words. No MLX here: a remote-only set-up may have none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import openai

# How long a look at the server (models, /props, /slots) may take: these answer at once when the
# server is up, and the app must not wait on one that is not.
PROBE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 10.0
SERVER_DEFAULT_MODEL = "default_model"
NO_KEY = "not-needed"  # the client insists on a key; servers started without one ignore it


def api_and_root(base_url: str) -> tuple[str, str]:
    """The OpenAI API's URL (ending in /v1) and the server's root (where llama-server's /props and
    /slots are), from a base URL given with or without its /v1."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/v1", root


def make_client(base_url: str, api_key: str | None, timeout: float) -> openai.OpenAI:
    """An OpenAI client for the server: no retries of its own (a failed reply says so and the user
    retries), `timeout` seconds for each read, at most CONNECT_TIMEOUT_S to connect."""
    api_url, _ = api_and_root(base_url)
    return openai.OpenAI(
        base_url=api_url,
        api_key=api_key or NO_KEY,
        timeout=openai.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)),
        max_retries=0,
    )


@dataclass(frozen=True)
class ServerSlot:
    """One slot of a llama-server, as its /slots endpoint reports it."""

    id: int
    n_ctx: int
    processing: bool
    tokens: int  # tokens in the slot (llama-server counts the prompt and what was generated so far)
    prompt_processed: int
    cached: int
    decoded: int


@dataclass(frozen=True)
class ServerFacts:
    """What the server reported when mlxchat looked: enough to start, to show, and to check."""

    base_url: str
    models: tuple[str, ...]
    model: str
    context: int | None  # tokens one request may use, when the server says (per slot on llama-server)
    total_slots: int | None  # llama-server's --parallel, from /props
    slots: tuple[ServerSlot, ...] | None  # None: the server has no /slots endpoint (or it is off)
    slots_note: str  # why there are no slots to show, or where they come from
    sees: bool | None = None  # whether its model takes images, where the server says (llama-server's /props)

    @property
    def model_name(self) -> str:
        """The model as the title bar shows it: a file or folder path by its last part (a repo id whole)."""
        if self.model.startswith(("/", "~", ".")):
            return self.model.rstrip("/").rsplit("/", 1)[-1] or self.model
        return self.model

    @property
    def kind(self) -> str:
        """What to call the server: llama-server when it answered /props, else by the API it speaks."""
        return "llama-server" if self.total_slots else "OpenAI-compatible server"

    @property
    def no_images(self) -> str:
        """Why chats may not send images to this server's model, where the server said it takes none."""
        return self.images_refused("its /props says it has no vision")

    @property
    def images_note(self) -> str:
        """What the inspector says of images: whether the server's model sees, as far as the server says."""
        if self.sees is None:
            return "the server does not say whether its model sees: images are sent, and a refusal says so"
        return ("its model sees (its /props: vision)" if self.sees else
                "its model does not take images (its /props: no vision)")

    def images_refused(self, said: str, change: str = "") -> str:
        """The words for the server's refusal of images (`said`: why, or the server's own words; `change`: what the
        chat can change first)."""
        return (f"{self.model_name} on the {self.kind} at {self.base_url} does not take images ({said}): "
                f"{change + ', or ' if change else ''}serve a model that sees (llama-server: its --mmproj)")

    @property
    def has_slots(self) -> bool:
        """Whether the slot view comes from the server (llama-server's /slots) rather than mlxchat's side."""
        return bool(self.total_slots) and self.slots is not None


class ServerError(Exception):
    """The server cannot be used: the message says what was tried and what came back."""


def describe_error(exc: BaseException, base_url: str) -> str:
    """One sentence for the user from a failed request to the server."""
    if isinstance(exc, openai.APITimeoutError):
        return f"the server at {base_url} did not answer in time"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"cannot reach the server at {base_url} ({cause}): is it running?"
    if isinstance(exc, openai.APIStatusError):
        return f"the server answered HTTP {exc.status_code}: {_server_message(exc)}"
    return f"{type(exc).__name__}: {exc}"


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own words from an error body: {"error": {"message": ...}}, {"error": "..."} or text."""
    body = exc.body  # the client keeps the body's "error" member when there is one
    if isinstance(body, str) and body:
        return body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    text = exc.response.text.strip() if exc.response is not None else ""
    return text or exc.message


def _quick(client: openai.OpenAI) -> openai.OpenAI:
    """The client for a look at the server: PROBE_TIMEOUT_S at most, less when the user's timeout is less."""
    timeout = client.timeout
    read = timeout.read if isinstance(timeout, openai.Timeout) else timeout
    return client.with_options(timeout=min(PROBE_TIMEOUT_S, read or PROBE_TIMEOUT_S))


def get_json(client: openai.OpenAI, root: str, path: str) -> Any:
    """GET `path` from the server's root (outside /v1) through the client: its JSON, or an openai error."""
    return _quick(client).get(root + path, cast_to=object)


def probe(client: openai.OpenAI, base_url: str, model: str | None) -> tuple[ServerFacts, tuple[str, ...]]:
    """Asks the server for its models, /props and /slots; returns the facts and warnings about them.

    Raises ServerError when the server cannot be reached.
    """
    _, root = api_and_root(base_url)
    warnings: list[str] = []
    try:
        listing = _quick(client).get("/models", cast_to=object)
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        raise ServerError(describe_error(exc, base_url)) from None
    except (openai.APIError, ValueError) as exc:  # an HTTP error, or a body that is not JSON
        listing = None
        why = describe_error(exc, base_url) if isinstance(exc, openai.APIError) else "no JSON"
        warnings.append(f"the server's /v1/models gave no list of models ({why})")
    entries = [m for m in (listing.get("data") or []) if isinstance(m, dict)] if isinstance(listing, dict) else []
    models = tuple(str(m.get("id")) for m in entries if m.get("id"))
    if model is None and not models:
        # mlx_lm.server's /v1/models fails without a Hugging Face cache folder; this name is how it
        # calls the model it was started with.
        model = SERVER_DEFAULT_MODEL
        warnings.append(f"the server lists no model: asking for {model!r} (mlx_lm.server's name for the model "
                        "it was started with); set remote.model in the config if the server needs another")
    elif model is None:
        model = models[0]
    elif models and model not in models:
        warnings.append(f"the server at {base_url} lists {', '.join(models)}, not {model}: it may refuse it")
    entry = next((m for m in entries if m.get("id") == model), {})
    context = _model_context(entry)

    total_slots: int | None = None
    sees: bool | None = None
    try:
        props = get_json(client, root, "/props")
        modalities = props.get("modalities") if isinstance(props, dict) else None
        if isinstance(modalities, dict) and isinstance(modalities.get("vision"), bool):
            sees = modalities["vision"]  # (llama-server: true when started with the model's --mmproj)
        if isinstance(props, dict) and isinstance(props.get("total_slots"), int):
            total_slots = props["total_slots"]
            settings = props.get("default_generation_settings") or {}
            context = settings.get("n_ctx") or context
    except (openai.APIError, ValueError):
        pass  # not a llama-server: only llama.cpp has /props
    slots, note = read_slots(client, base_url) if total_slots else (None, "")
    if not total_slots:
        note = "the server has no /props or /slots (only llama-server has them): the slots are mlxchat's own"
    return ServerFacts(base_url, models, model, context, total_slots, slots, note, sees), tuple(warnings)


def read_slots(client: openai.OpenAI, base_url: str) -> tuple[tuple[ServerSlot, ...] | None, str]:
    """llama-server's /slots as ServerSlots, or None and why not (started with --no-slots, gone...)."""
    _, root = api_and_root(base_url)
    try:
        data = get_json(client, root, "/slots")
    except (openai.APIError, ValueError) as exc:
        return None, f"/slots is not available ({describe_error(exc, base_url)}): the slots shown are mlxchat's own"
    if not isinstance(data, list):
        return None, "/slots did not answer with a list of slots: the slots shown are mlxchat's own"
    return tuple(parse_slot(s) for s in data if isinstance(s, dict)), "slots as llama-server's /slots reports them"


def erase_slot(client: openai.OpenAI, base_url: str, slot_id: int) -> bool:
    """Asks llama-server to forget a slot's cache; False when it will not (not started with --slot-save-path)."""
    _, root = api_and_root(base_url)
    try:
        _quick(client).post(f"{root}/slots/{slot_id}?action=erase", cast_to=object)
    except (openai.APIError, ValueError):
        return False
    return True


def parse_slot(entry: dict[str, Any]) -> ServerSlot:
    """One /slots entry; older llama-server builds say `state` for is_processing, and `n_past` for the
    tokens, and give `next_token` as an object rather than a list of one."""
    following = entry.get("next_token") or {}
    if isinstance(following, list):
        following = following[0] if following else {}
    processing = entry.get("is_processing", entry.get("state", 0) != 0)
    return ServerSlot(
        id=int(entry.get("id", 0)),
        n_ctx=int(entry.get("n_ctx") or 0),
        processing=bool(processing),
        tokens=int(entry.get("n_prompt_tokens", entry.get("n_past", 0)) or 0),
        prompt_processed=int(entry.get("n_prompt_tokens_processed") or 0),
        cached=int(entry.get("n_prompt_tokens_cache") or 0),
        decoded=int(following.get("n_decoded") or 0) if processing else 0,
    )


def _model_context(entry: dict[str, Any]) -> int | None:
    """The context length a /v1/models entry gives, under the names servers use for it."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (entry.get("max_model_len"), entry.get("context_length"), meta.get("n_ctx")):
        if isinstance(value, int) and value > 0:
            return value
    return None

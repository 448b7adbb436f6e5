"""Start-up with `engine = "remote"`: the same engine API over an OpenAI-compatible server.

Nothing here imports MLX: a machine that only talks to a server needs none.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from mlxchat.app.config.settings import Settings
from mlxchat.app.session.start import StartFailure
from mlxchat.engine import make_client, probe, Progress, remote_plan, RemoteEngine, ServerError, StartedEngine

SERVER_REMEDY = (
    "Start the server, or set base_url (and model) in the [remote] table of the config file; "
    "`mlxchat doctor` shows what the server answers."
)


def api_key(settings: Settings) -> str | None:
    """The API key from the environment variable that [remote] api_key_env names (None: no key)."""
    name = settings.remote.api_key_env
    return os.environ.get(name) or None if name else None


def start_remote_engine(settings: Settings, progress: Callable[[Progress], None]) -> StartedEngine:
    """Asks the server what it runs and starts a RemoteEngine on it, as start_engine starts the local one.

    There are no model facts to re-evaluate slots with: a server's slots are its own. Raises
    StartFailure when the server cannot be used.
    """
    remote = settings.remote
    progress(Progress(f"Asking the server at {remote.base_url}", 0, 0))
    warnings: list[str] = []
    name = remote.api_key_env
    if name and not os.environ.get(name):
        warnings.append(f"remote.api_key_env names {name}, which is not set: no API key is sent")
    client = make_client(remote.base_url, api_key(settings), remote.timeout)
    try:
        facts, found = probe(client, remote.base_url, remote.model)
    except ServerError as exc:
        raise StartFailure(str(exc), SERVER_REMEDY) from None
    finally:
        client.close()
    warnings += found
    parallel = min(settings.parallel, settings.parallel_max)
    if parallel != settings.parallel:
        warnings.append(f"parallel = {settings.parallel} is more than parallel_max = {settings.parallel_max}: using {parallel}")
    plan = remote_plan(facts, parallel)
    if not facts.has_slots:
        warnings.append(f"{facts.slots_note}; up to {plan.parallel} chats answer at once (parallel in the config)")
    engine = RemoteEngine(facts, plan, api_key=api_key(settings), timeout=remote.timeout)
    # A server reads the tools its model can call: they are offered, and its template decides. Images are offered
    # unless it says its model takes none (only llama-server says): a server that refuses them says so in the chat.
    return StartedEngine(engine, plan, facts.model_name, tuple(warnings), None, takes_tools=True,
                         sees=facts.sees is not False, why_no_images=facts.no_images if facts.sees is False else "")

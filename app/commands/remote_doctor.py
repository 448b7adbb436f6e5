"""`mlxchat doctor` with `engine = "remote"`: what the server answers, in plain lines (no MLX needed)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import openai

from mlxchat.app.config.settings import Settings
from mlxchat.app.session.remote import api_key
from mlxchat.engine import api_and_root, describe_error, make_client, probe, remote_plan, ServerError

Line = Callable[[str, str], None]


def remote_lines(settings: Settings, line: Line) -> int:
    """Checks the server's URL, its models, the model and its slots; returns how many problems stop mlxchat."""
    remote = settings.remote
    api_url, _ = api_and_root(remote.base_url)
    line("engine", f"remote: {api_url} (timeout {remote.timeout:g} s)")
    name = remote.api_key_env
    if name:
        line("  api key", f"from ${name}" if os.environ.get(name) else f"${name} is not set: no key is sent")
    client = make_client(remote.base_url, api_key(settings), remote.timeout)
    try:
        facts, warnings = probe(client, remote.base_url, remote.model)
    except ServerError as exc:
        line("  ERROR", str(exc))
        return 1
    finally:
        client.close()
    line("server", f"{facts.kind}; /v1/models lists {', '.join(facts.models) or 'nothing'}")
    chosen = "configured" if remote.model else ("the first listed" if facts.models else "none listed")
    line("model", f"{facts.model} ({chosen})")
    problems = _ask_model(settings, facts.model, line)
    per = "per slot" if facts.total_slots else "per request"
    line("context", f"{facts.context} tokens {per}" if facts.context else "not reported by the server")
    if facts.has_slots:
        assert facts.slots is not None
        busy = sum(s.processing for s in facts.slots)
        line("slots", f"{facts.total_slots} (its --parallel, from /props); /slots: {busy} processing, "
                      f"{len(facts.slots) - busy} idle")
    else:
        line("slots", facts.slots_note)
        line("", f"up to {remote_plan(facts, settings.parallel).parallel} chats answer at once (parallel)")
    line("images", facts.images_note)
    for warning in warnings:
        line("  warning", warning)
    return problems


def _ask_model(settings: Settings, model: str, line: Line) -> int:
    """Asks the model for one token, the surest sign that the server will answer chats; 1 if it fails."""
    client = make_client(settings.remote.base_url, api_key(settings), settings.remote.timeout)
    start = time.perf_counter()
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
    except openai.APIError as exc:
        line("  ERROR", f"the model does not answer: {describe_error(exc, settings.remote.base_url)}")
        return 1
    finally:
        client.close()
    line("  answers", f"yes: one token in {time.perf_counter() - start:.2f} s")
    return 0

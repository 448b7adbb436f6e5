"""The remote engine against a real mlx_lm.server on localhost serving the tiny model.

One server for the module; the tests that kill a server start their own.
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxchat.engine.events import Done, SamplingParams, TextDelta
from mlxchat.engine.remote.engine import RemoteEngine
from mlxchat.engine.remote.state import remote_plan
from mlxchat.engine.remote.server import ServerError, ServerFacts, make_client, probe
from tests.servers import Server, free_port, mlx_lm_server, running, serving_with_mlx_lm

HELLO = [{"role": "user", "content": "Hello, how are you today?"}]
# The endless tiny model never ends a reply by itself and streams about 700 tokens a second here.
LONG = SamplingParams(max_tokens=4000)


@pytest.fixture(scope="module")
def mlx_server(endless_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving_with_mlx_lm(endless_model_dir, tmp_path_factory.mktemp("mlx-server")) as server:
        yield server


def start_engine(url: str, parallel: int = 2) -> RemoteEngine:
    client = make_client(url, None, 10)
    try:
        facts, _ = probe(client, url, None)
    finally:
        client.close()
    return RemoteEngine(facts, remote_plan(facts, parallel), timeout=10)


@pytest.fixture
def engine(mlx_server: Server) -> Iterator[RemoteEngine]:
    engine = start_engine(mlx_server.url)
    yield engine
    engine.shutdown()


def first_delta(handle, deltas: list[str]) -> None:
    """Reads the handle's events up to the first text, keeping the texts in `deltas`."""
    for event in handle.events(timeout=30):
        assert isinstance(event, TextDelta), event
        deltas.append(event.text)
        if event.text:
            return


def test_the_engine_does_not_import_mlx(mlx_server: Server) -> None:
    # A machine that only talks to a server may have no working MLX: a fresh interpreter shows what loads.
    code = (
        "import sys; from mlxchat.engine.remote.engine import RemoteEngine; "
        "from mlxchat.app.session.remote import start_remote_engine; "
        "from mlxchat.app.commands.remote_doctor import remote_lines; "
        "print(sorted(m for m in sys.modules if m == 'mlx' or m.startswith(('mlx.', 'mlx_lm'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_probe_reports_the_model_and_no_slots(mlx_server: Server, endless_model_dir: Path) -> None:
    client = make_client(mlx_server.url + "/v1/", None, 10)
    facts, warnings = probe(client, mlx_server.url + "/v1/", None)
    assert facts.models == (str(endless_model_dir.resolve()),) and facts.model == facts.models[0]
    assert facts.total_slots is None and not facts.has_slots and "/slots" in facts.slots_note
    assert warnings == ()
    _, warnings = probe(client, mlx_server.url, "some-other-model")
    assert warnings and "not some-other-model" in warnings[0]
    plan = remote_plan(facts, 3)
    assert plan.parallel == 3 and plan.summary == "OpenAI-compatible server: 3 slots, context not reported"


def test_a_server_that_is_not_there_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=f"cannot reach the server at {url}.*Connection refused.*is it running"):
        probe(make_client(url, None, 5), url, None)


def test_reply_streams_to_length_with_the_servers_usage(engine: RemoteEngine) -> None:
    engine.bind(0, "first chat")
    handle = engine.submit(0, HELLO, sampling=SamplingParams(max_tokens=24))
    events = list(handle.events(timeout=30))
    deltas, done = events[:-1], events[-1]
    assert isinstance(done, Done) and done.reason == "length" and done.error is None
    assert len(deltas) >= 2 and all(isinstance(e, TextDelta) and e.slot_id == 0 for e in deltas)
    assert "".join(e.text for e in deltas) == done.text != ""
    assert done.stats.generated_tokens == 24 and done.stats.prompt_tokens > 5
    assert done.stats.ttft_s > 0 and done.stats.decode_tok_s > 0
    slot = engine.snapshot().slots[0]
    assert slot.state == "idle" and slot.label == "first chat"
    assert slot.used == done.stats.prompt_tokens + 24 and slot.prompt_tokens == done.stats.prompt_tokens


def test_cancel_mid_reply_keeps_what_came(engine: RemoteEngine) -> None:
    handle = engine.submit(0, HELLO, sampling=LONG)
    deltas: list[str] = []
    first_delta(handle, deltas)
    assert engine.snapshot().slots[0].state == "decoding"
    engine.cancel(0)
    done = handle.result(timeout=30)
    assert done.reason == "cancelled" and done.error is None and done.stats.generated_tokens < LONG.max_tokens
    assert done.text.startswith("".join(deltas)) and done.text
    assert engine.snapshot().slots[0].state == "idle"
    # The slot (and the server) take the next reply at once.
    again = engine.submit(0, HELLO, sampling=SamplingParams(max_tokens=8)).result(timeout=30)
    assert again.reason == "length" and again.text


def test_two_chats_stream_at_once(engine: RemoteEngine) -> None:
    a = engine.submit(0, HELLO, sampling=LONG)
    b = engine.submit(1, [{"role": "user", "content": "Hello, how are you?"}], sampling=LONG)
    assert engine.submit(1, HELLO).result(timeout=5).refused  # one reply per slot, as the local engine
    texts: tuple[list[str], list[str]] = ([], [])
    first_delta(a, texts[0])
    first_delta(b, texts[1])
    assert [s.state for s in engine.snapshot().slots] == ["decoding", "decoding"]
    assert engine.snapshot().aggregate_tok_s > 0
    engine.cancel(0)
    engine.cancel(1)
    done_a, done_b = a.result(timeout=5), b.result(timeout=5)
    assert done_a.reason == done_b.reason == "cancelled"
    assert done_a.text.startswith("".join(texts[0])) and done_b.text.startswith("".join(texts[1]))


def test_a_request_the_server_rejects_is_refused_with_its_message(engine: RemoteEngine) -> None:
    # mlx_lm.server answers an unknown model with HTTP 404 and the loader's words (offline, it cannot fetch it).
    wrong = RemoteEngine(dataclasses.replace(engine.facts, model="no-such/model"), engine.plan, timeout=10)
    try:
        done = wrong.submit(0, HELLO).result(timeout=30)
    finally:
        wrong.shutdown()
    assert done.refused and done.reason == "error" and done.text == ""
    assert done.error is not None and done.error.startswith("the server answered HTTP 404: ")
    assert "HF_HUB_OFFLINE" in done.error  # the server's own message, not the JSON around it
    assert engine.submit(0, HELLO, sampling=SamplingParams(max_tokens=4)).result(timeout=30).reason == "length"


def test_raw_tokens_and_missing_slots_are_refused(engine: RemoteEngine) -> None:
    assert "not raw tokens" in (engine.submit(0, tokens=[1, 2, 3]).result(timeout=5).error or "")
    assert "no slot" in (engine.submit(5, HELLO).result(timeout=5).error or "")


def test_parallel_is_mlxchats_own_on_a_server_without_slots(engine: RemoteEngine) -> None:
    handle = engine.submit(1, HELLO, sampling=LONG)
    first_delta(handle, [])
    survived = engine.repartition(dataclasses.replace(engine.plan, parallel=1)).result(timeout=5)
    assert survived == {0: True, 1: False}
    assert handle.result(timeout=5).reason == "cancelled"  # the slot that went had its reply stopped
    assert len(engine.snapshot().slots) == 1 and engine.plan.parallel == 1


def test_server_killed_mid_reply_then_restarted(endless_model_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    command, env = mlx_lm_server(endless_model_dir, port, tmp_path)
    with running(command, port, tmp_path / "server.log", env) as server:
        engine = start_engine(server.url)
        handle = engine.submit(0, HELLO, sampling=LONG)
        deltas: list[str] = []
        first_delta(handle, deltas)
        server.kill()
        events = list(handle.events(timeout=15))
    done = events[-1]
    streamed = "".join(deltas) + "".join(e.text for e in events[:-1] if isinstance(e, TextDelta))
    assert isinstance(done, Done) and done.reason == "error" and not done.refused
    assert done.text == streamed != ""  # nothing that came is lost
    assert done.error is not None and "stopped sending before the reply ended" in done.error
    assert "regenerate" in done.error
    # While it is down: a clear error at once, not a hang.
    down = engine.submit(0, HELLO).result(timeout=15)
    assert down.reason == "error" and "cannot reach the server" in (down.error or "")
    with running(command, port, tmp_path / "server.log", env):
        retry = engine.submit(0, HELLO, sampling=SamplingParams(max_tokens=8)).result(timeout=30)
        assert retry.reason == "length" and retry.text
    engine.shutdown()


def test_a_server_that_never_answers_times_out_and_cancel_does_not_wait() -> None:
    # A real listening socket that takes connections and never answers: a stuck or very slow server.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(ServerError, match=f"the server at {url} did not answer in time"):
            probe(make_client(url, None, 0.5), url, None)
        facts = ServerFacts(url, (), "m", None, None, None, "")
        engine = RemoteEngine(facts, remote_plan(facts, 2), timeout=0.5)
        start = time.monotonic()
        done = engine.submit(0, HELLO).result(timeout=10)
        assert done.reason == "error" and not done.refused
        assert done.error == f"the server at {url} did not answer in time; regenerate (ctrl+r) to try again"
        assert 0.4 < time.monotonic() - start < 5
        listener.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:  # the connections of the requests that timed out
                listener.accept()[0].close()
        listener.setblocking(True)
        waiting = engine.submit(1, HELLO)
        connection, _ = listener.accept()  # its request reached the server, which never answers
        engine.cancel(1)
        # Cancelled, not timed out: the cancel does not wait for the server's 0.5 s.
        assert waiting.result(timeout=30).reason == "cancelled"
        connection.close()
        engine.shutdown()

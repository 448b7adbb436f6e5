"""MCP servers that fail, against real processes: a server that exits or whose URL goes away while idle is named at
once, its tools gone, and a restart brings it back; a program that exits at once, a missing one and a URL nothing
answers at are each named as they are; `mlxchat doctor` stops a server that never answers, at its timeout."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlxchat.app.cli import main
from tests.app.test_tool_servers import STDIO, TOOLS, said, started
from tests.servers import serving_mcp_over_http


def server_pid(log: Path | None) -> int:
    """The test server's pid, from the line it writes to its log as it starts."""
    assert log is not None
    return int(re.findall(r"starting \(pid (\d+)\)", log.read_text())[-1])


def test_a_server_gone_while_idle_is_named_at_once_and_a_restart_brings_it_back(tmp_path: Path) -> None:
    with serving_mcp_over_http(tmp_path) as http:
        servers = started({"test": STDIO, "web": {"url": f"{http.url}/mcp"}}, tmp_path / "logs")
        try:
            test, web = servers.states()
            assert (test.status, web.status) == ("ready", "ready"), (said(test), said(web))
            os.kill(server_pid(test.log), signal.SIGKILL)
            http.kill()
            gone = time.monotonic()
            while any(s.status == "ready" for s in servers.states()) and time.monotonic() - gone < 10:
                time.sleep(0.02)
            assert time.monotonic() - gone < 2.0
            assert test.error == "it stopped (ended by signal SIGKILL)"
            # (ConnectError where its watch found the port closed, ReadError where the kill cut a read in flight)
            assert re.match(rf"the connection to {re.escape(http.url)}/mcp was lost \((ConnectError|ReadError)", web.error)
            assert servers.tools() == []
            assert servers.restart("test") and not servers.restart("test")  # (once: it is starting)
            assert servers.settled(30) and test.status == "ready", said(test)
            assert [t.name for t in servers.tools()] == TOOLS
        finally:
            servers.close()


def test_each_way_a_server_fails_to_start_is_named_as_it_is(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-server")
    servers = started({"quits": {"command": "sh", "args": ["-c", "echo 'no token' >&2; exit 3"]},
                       "silent": {"command": "sh", "args": ["-c", "exit 0"]},
                       "missing": {"command": missing},
                       "nowhere": {"url": "http://127.0.0.1:9/mcp"}}, tmp_path / "logs")
    try:
        quits, silent, missing_one, nowhere = servers.states()
        assert quits.why() == f"it exited at once (exit code 3) (its output: {quits.log})"
        # A log it wrote nothing to this time is no evidence, nor one a program that never ran could not write.
        assert silent.why() == "it exited at once (exit code 0)"
        assert missing_one.why() == f"cannot run {missing!r}: no such program (check `command` and your PATH)"
        assert nowhere.why() == "cannot reach http://127.0.0.1:9/mcp (ConnectError: All connection attempts failed)"
    finally:
        servers.close()


def test_doctor_stops_a_server_that_never_answers_at_its_timeout(tmp_path: Path, capsys) -> None:
    marker = f"{os.getpid()}{time.monotonic_ns() % 100000}"  # a sleep no other run starts
    config = tmp_path / "config.toml"
    config.write_text(
        'engine = "remote"\n[remote]\nbase_url = "http://127.0.0.1:9"\ntimeout = 1\n'
        f'[mcp]\nstart_timeout = 1.5\n[mcp.servers.never]\ncommand = "sleep"\nargs = ["{marker}"]\n'
    )
    import mcp.client.client  # noqa: F401  (imported before the clock starts: the SDK's import is not the server's time)

    began = time.monotonic()
    assert main(["doctor", "--config", str(config)]) == 1
    assert time.monotonic() - began < 1.5 + 2
    out = capsys.readouterr().out
    assert "mcp never     ERROR: it did not answer within 1.5 s; the chats go on without it" in out
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert f"sleep {marker}" not in processes


def test_doctor_leaves_no_process_when_it_exits(tmp_path: Path) -> None:
    """As a command of its own: the process ends, and nothing it started is left to be adopted by PID 1."""
    marker = f"{os.getpid()}{time.monotonic_ns() % 100000 + 1}"
    config = tmp_path / "config.toml"
    config.write_text(
        'engine = "remote"\n[remote]\nbase_url = "http://127.0.0.1:9"\ntimeout = 1\n'
        f'[mcp]\nstart_timeout = 1\n[mcp.servers.never]\ncommand = "sleep"\nargs = ["{marker}"]\n'
    )
    done = subprocess.run([sys.executable, "-m", "mlxchat.app.cli", "doctor", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 1, done.stderr
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert f"sleep {marker}" not in processes


def test_doctor_says_what_its_exit_status_means(capsys) -> None:
    assert main(["doctor", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 when mlxchat can run as set; 2 when the settings cannot run with this model or memory" in out
    assert "1 when something else stops it: the model does not load, the server does not answer, or an MCP " \
           "server fails" in out

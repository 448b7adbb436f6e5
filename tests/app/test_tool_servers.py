"""The MCP servers of the config, against a real MCP server written with the SDK (tests/mcp_server.py), over stdio
and over streamable HTTP on localhost: started in the background, their tools, calls that answer, fail, time out
and kill their server, and `mlxchat doctor` naming a broken one."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from mlxchat.app.cli import main
from mlxchat.app.config.mcp import Mcp
from mlxchat.app.tools.servers import ServerState, ToolServers
from tests.conftest import ROOT
from tests.servers import serving_mcp_over_http

STDIO = {"command": sys.executable, "args": ["-m", "tests.mcp_server", "stdio"], "cwd": str(ROOT)}
TOOLS = ["weather", "slow", "fails", "long_text", "die"]


def said(state: ServerState) -> str:
    """A server's error and its log: why it did not start, where that happened (a GPU machine's image) and
    its stderr went unseen."""
    return f"{state.error}\n{state.log.read_text()[-3000:] if state.log and state.log.exists() else ''}"


def started(servers: dict, log_dir: Path) -> ToolServers:
    tool_servers = ToolServers(Mcp.model_validate({"servers": servers}), log_dir)
    tool_servers.start()
    assert tool_servers.settled(30)
    return tool_servers


def test_a_server_not_enabled_is_not_started_and_offers_no_tools(tmp_path: Path) -> None:
    servers = started({"off": STDIO | {"enabled": False}, "on": STDIO}, tmp_path / "logs")
    try:
        off, on = servers.states()
        assert (off.status, on.status) == ("off", "ready"), said(on)
        assert {tool.server for tool in servers.tools()} == {"on"} and off.log is None
    finally:
        servers.close()


def test_a_stdio_server_lists_its_tools_and_runs_their_calls(tmp_path: Path) -> None:
    servers = started({"test": STDIO, "broken": {"command": str(tmp_path / "no-such-server")}}, tmp_path / "logs")
    try:
        test, broken = servers.states()
        assert test.status == "ready", said(test)
        assert [t.name for t in test.tools] == TOOLS
        assert broken.status == "failed" and "no such program" in broken.error
        tools = {t.name: t for t in servers.tools()}
        assert tools["weather"].function()["function"]["parameters"]["required"] == ["city"]
        weather = servers.call(tools["weather"], {"city": "Paris"}, 10).result(30)
        assert (weather.text, weather.error) == ("18 °C and clear in Paris", False)
        failed = servers.call(tools["fails"], {"reason": "no"}, 10).result(30)
        assert failed.error and "fails" in failed.text
        slow = servers.call(tools["slow"], {"seconds": 30}, 0.3).result(30)
        assert slow.error and "timed out after 0.3 s" in slow.text
        # The server's stderr went to its log, readable by the user only; never to the screen.
        assert "mlxchat-test-tools: starting" in test.log.read_text()  # type: ignore[union-attr]
        assert stat.S_IMODE(test.log.stat().st_mode) == 0o600  # type: ignore[union-attr]
        # A server that dies mid-call: the call says so, and the server is failed, its tools gone.
        died = servers.call(tools["die"], {}, 10).result(30)
        assert died.error and "the server test stopped" in died.text
        assert servers.states()[0].status == "failed" and servers.tools() == []
        assert servers.call(tools["weather"], {"city": "Paris"}, 10).result(30).error
    finally:
        servers.close()


def test_a_streamable_http_server_answers_and_a_bad_url_is_named(tmp_path: Path) -> None:
    with serving_mcp_over_http(tmp_path) as http:
        servers = started({"web": {"url": f"{http.url}/mcp"}, "nowhere": {"url": "http://127.0.0.1:9/mcp"}},
                          tmp_path / "logs")
        try:
            web, nowhere = servers.states()
            assert web.status == "ready", said(web)
            assert [t.name for t in web.tools] == TOOLS
            assert nowhere.status == "failed" and "ConnectError" in nowhere.error
            weather = next(t for t in servers.tools() if t.name == "weather")
            assert servers.call(weather, {"city": "Oslo"}, 10).result(30).text == "18 °C and clear in Oslo"
        finally:
            servers.close()


def test_headers_env_sends_each_header_from_its_variable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TOOLS_HTTP_TOKEN", "s3cret")  # the server asks for `Authorization: Bearer s3cret`
    monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer s3cret")
    with serving_mcp_over_http(tmp_path) as http:
        servers = started({"with": {"url": f"{http.url}/mcp", "headers_env": {"Authorization": "MCP_TEST_TOKEN"}},
                           "without": {"url": f"{http.url}/mcp"},
                           "unset": {"url": f"{http.url}/mcp", "headers_env": {"Authorization": "MCP_NO_SUCH_VAR"}}},
                          tmp_path / "logs")
        try:
            with_header, without, unset = servers.states()
            assert with_header.status == "ready" and [t.name for t in with_header.tools] == TOOLS, said(with_header)
            # Refused with 401 (the SDK's own error: "Server returned an error response"): the status, and what to set.
            assert without.status == "failed" and without.error.startswith(f"{http.url}/mcp answered HTTP 401"), \
                without.error
            assert "send it with `headers_env`, e.g. under [mcp.servers.without]" in without.error
            assert unset.status == "failed" and unset.error.endswith(
                "answered HTTP 401 Unauthorized: check the headers `headers_env` sends "
                "(Authorization from $MCP_NO_SUCH_VAR (not set))"), unset.error
        finally:
            servers.close()


def test_doctor_lists_each_server_with_its_tools_or_its_error(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        'engine = "remote"\n[remote]\nbase_url = "http://127.0.0.1:9"\ntimeout = 1\n'
        f'[mcp.servers.test]\ncommand = {sys.executable!r}\nargs = ["-m", "tests.mcp_server", "stdio"]\n'
        f'cwd = {str(ROOT)!r}\n[mcp.servers.broken]\ncommand = "/nonexistent/mcp-server"\n'
    )
    assert main(["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "mcp test      ready, 5 tools: weather, slow, fails, long_text, die" in out
    assert "mcp broken    ERROR: cannot run '/nonexistent/mcp-server': no such program" in out
    assert "Traceback" not in out

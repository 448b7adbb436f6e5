"""`mlxchat doctor` with engine = "remote", against a real mlx_lm.server on localhost (and one that is not there)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxchat.app.cli import main
from tests.servers import Server, free_port, serving_with_mlx_lm


@pytest.fixture(scope="module")
def mlx_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving_with_mlx_lm(tiny_model_dir, tmp_path_factory.mktemp("mlx-server")) as server:
        yield server


def config(tmp_path: Path, remote: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'engine = "remote"\nparallel = 3\n\n[remote]\n{remote}\n')
    return path


def test_doctor_checks_the_url_the_model_and_the_slots(
    mlx_server: Server, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_SERVER_KEY", "sk-secret-value")
    path = config(tmp_path, f'base_url = "{mlx_server.url}/v1"\napi_key_env = "MY_SERVER_KEY"')
    assert main(["--config", str(path), "doctor"]) == 0
    out = capsys.readouterr().out
    lines = {line[:14].strip(): line[14:] for line in out.splitlines()}
    assert lines["engine"] == f"remote: {mlx_server.url}/v1 (timeout 60 s)"
    assert lines["api key"] == "from $MY_SERVER_KEY" and "sk-secret-value" not in out
    assert lines["server"] == f"OpenAI-compatible server; /v1/models lists {tiny_model_dir.resolve()}"
    assert lines["model"] == f"{tiny_model_dir.resolve()} (the first listed)"
    assert lines["answers"].startswith("yes: one token in ")
    assert lines["context"] == "not reported by the server"
    assert "no /props or /slots" in lines["slots"] and "up to 3 chats answer at once (parallel)" in out
    assert lines["images"] == "the server does not say whether its model sees: images are sent, and a refusal says so"
    assert "mlx " not in out  # no MLX is looked at for a remote engine


def test_doctor_says_when_the_model_does_not_answer(
    mlx_server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config(tmp_path, f'base_url = "{mlx_server.url}"\nmodel = "no-such/model"')
    assert main(["--config", str(path), "doctor"]) == 1
    out = capsys.readouterr().out
    assert "ERROR       the model does not answer: the server answered HTTP 404" in out
    assert "lists " in out and "not no-such/model: it may refuse it" in out


def test_doctor_says_when_the_server_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--config", str(config(tmp_path, f'base_url = "{url}"')), "doctor"]) == 1
    assert f"ERROR       cannot reach the server at {url}" in capsys.readouterr().out


def test_remote_settings_are_checked_like_the_others(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config(tmp_path, "timeout = 0")), "doctor"]) == 2
    assert "remote.timeout = 0 is not allowed: must be more than 0" in capsys.readouterr().err


def test_doctor_says_whether_a_llama_servers_model_sees(seeing_llama: Server, blind_llama: Server, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    for server, said in ((seeing_llama, "its model sees (its /props: vision)"),
                         (blind_llama, "its model does not take images (its /props: no vision)")):
        assert main(["--config", str(config(tmp_path, f'base_url = "{server.url}"')), "doctor"]) == 0
        lines = {line[:14].strip(): line[14:] for line in capsys.readouterr().out.splitlines()}
        assert lines["images"] == said

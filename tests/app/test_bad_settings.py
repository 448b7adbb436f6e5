"""Every class of bad setting is refused before anything starts: exit 2, one message naming the key,
the file as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlxchat.app.cli import main


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Runs `mlxchat doctor` with `argv`, checks it exits 2 without a traceback, returns what it printed."""
    assert main([*argv, "doctor"]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return out + err


def refused_with(
    path: Path, file: str, env: dict[str, str], flags: list[str],
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> str:
    """`refused` with config file `path` holding `file`, the variables `env` and the `flags`; checks the
    file is left as it was."""
    path.write_text(file)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    message = refused(["--config", str(path), *flags], capsys)
    assert path.read_text() == file
    return message


def test_a_config_file_that_is_not_utf8_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    data = "theme = 'caf\u00e9'\n".encode("latin-1")
    path.write_bytes(data)
    message = refused(["--config", str(path)], capsys)
    assert f"{path}: the config file is not UTF-8 text" in message and "save it as UTF-8" in message
    assert path.read_bytes() == data


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_config_path_that_is_not_a_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    path = tmp_path / "c.toml"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)  # reading it would wait forever for a writer
    monkeypatch.setenv("MLXCHAT_CONFIG", str(path))
    assert f"{path}: the config file is not a regular file" in refused([], capsys)


@pytest.mark.parametrize(
    ("flags", "file", "env", "expected"),
    [
        (["--ctx-size", "0"], "", {}, "--ctx-size 0 is not allowed: must be at least 1"),
        (["--ctx-per-slot", "-5"], "", {}, "--ctx-per-slot -5 is not allowed: must be at least 1"),
        (["--ctx-size", str(10**30)], "", {}, f"--ctx-size {10**30} is not allowed: must be at most 16777216"),
        ([], f"parallel = {10**30}\n", {}, f"c.toml: parallel = {10**30} is not allowed: must be at most 1024"),
        ([], "parallel = 1e400\n", {}, "c.toml: parallel = inf is not allowed: must be a finite number"),
        ([], "[sampling]\ntemperature = nan\n", {},
         "c.toml: sampling.temperature = nan is not allowed: must be a finite number"),
        ([], f"[sampling]\nseed = {2**64}\n", {},
         "c.toml: sampling.seed = 18446744073709551616 is not allowed: must be at most"),
        ([], "", {"MLXCHAT_PER_SLOT_FLOOR": "99999999999"},
         "MLXCHAT_PER_SLOT_FLOOR=99999999999 is not allowed: must be at most"),
        ([], "engine_nice = 20\n", {}, "c.toml: engine_nice = 20 is not allowed: must be at most 19"),
    ],
)
def test_numbers_no_type_or_machine_can_hold_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    flags: list[str], file: str, env: dict[str, str], expected: str,
) -> None:
    assert expected in refused_with(tmp_path / "c.toml", file, env, flags, capsys, monkeypatch)


@pytest.mark.parametrize(
    ("flags", "file", "env", "expected"),
    [
        ([], "per_slot_min = 2000\n", {},
         "per_slot_min = 2000 (FILE) is more than per_slot_floor = 1024 (default): "
         "lower per_slot_min or raise per_slot_floor"),
        (["--ctx-size", "4096"], "ctx_per_slot = 8192\n", {},
         "ctx_per_slot = 8192 (FILE) is more than ctx_size = 4096 (--ctx-size): lower ctx_per_slot or raise ctx_size"),
        (["--ctx-size", "256"], "", {"MLXCHAT_PER_SLOT_MIN": "300", "MLXCHAT_PER_SLOT_FLOOR": "300"},
         "per_slot_min = 300 (MLXCHAT_PER_SLOT_MIN) is more than ctx_size = 256 (--ctx-size)"),
        (["--ctx-per-slot", "200"], "", {},
         "per_slot_min = 256 (default) is more than ctx_per_slot = 200 (--ctx-per-slot)"),
        (["--ctx-size", "1024", "--parallel", "8"], "", {},
         "ctx_size = 1024 (--ctx-size), parallel = 8 (--parallel) and per_slot_min = 256 (default): "
         "1024 / 8 = 128 tokens per slot is below the minimum of 256: use fewer slots or a larger total context"),
        ([], "", {"MLXCHAT_PARALLEL_MAX": "0"}, "MLXCHAT_PARALLEL_MAX=0 is not allowed: must be at least 1"),
    ],
)
def test_settings_that_contradict_each_other_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    flags: list[str], file: str, env: dict[str, str], expected: str,
) -> None:
    path = tmp_path / "c.toml"
    message = refused_with(path, file, env, flags, capsys, monkeypatch)
    assert expected.replace("FILE", str(path)) in message
    assert len(message.strip().splitlines()) == 1  # one clear message


def test_sizes_the_model_can_never_use_are_refused_when_it_loads(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The tiny model is trained on 4096 tokens: a slot can never use more.
    path = tmp_path / "c.toml"
    path.write_text("ctx_per_slot = 6000\n")
    message = refused(["--config", str(path), "--model", str(tiny_model_dir)], capsys)
    expected = f"REFUSED: ctx_per_slot = 6000 ({path}) is more than the model can use: the model was trained on 4096"
    assert expected in message
    assert "tokens per slot" not in message
    assert path.read_text() == "ctx_per_slot = 6000\n"

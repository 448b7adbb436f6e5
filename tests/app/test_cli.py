"""The `mlxchat` command line: help, version, doctor, and how bad input is reported."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlxchat.app.cli import main
from mlxchat.app.commands.console_progress import ConsoleProgress
from mlxchat.engine.cpu.blas import find_optimized_blas
from mlxchat.engine.memory import memory_info, parse_meminfo, parse_vm_stat
from mlxchat.engine.loading.models import Progress
from tests.markers import CONSOLE_SCRIPT, needs_console_script, needs_install


def mlxchat(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the installed console script, as a user would, on this checkout's code (tests/conftest.py puts it first
    on the PYTHONPATH where the installed mlxchat is another copy)."""
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )


def test_help_lists_the_subcommands_and_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for word in ("doctor", "bench", "--model", "--ctx-size", "--parallel", "--ctx-per-slot", "--config"):
        assert word in out


@needs_install
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "mlxchat 0.1.0"


@needs_console_script
def test_doctor_console_script_reports_context_blas_and_model(tiny_model_dir: Path) -> None:
    done = mlxchat("doctor", "--model", str(tiny_model_dir), "--ctx-size", "8192", "--parallel", "4")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "8192 / 4 = 2048 tokens per slot" in out
    blas_line = next(line for line in out.splitlines() if line.startswith("blas"))
    found = find_optimized_blas()
    if sys.platform == "darwin":
        assert "accelerate" in blas_line
    elif found is None:
        assert "reference" in blas_line and "to fix:" in out
    else:
        assert ("mkl" if "mkl" in found else "openblas") in blas_line
    assert f"folder: {tiny_model_dir}" in out
    assert "float32" in out and "trained context 4096 tokens" in out
    assert "KV cache" in out and "available" in out
    assert "Traceback" not in done.stderr


def test_doctor_flags_work_after_and_before_the_subcommand(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--parallel", "2", "doctor", "--model", str(tiny_model_dir), "--ctx-per-slot", "1024"]) == 0
    out = capsys.readouterr().out
    # ctx_per_slot alone: the total is parallel x ctx_per_slot.
    assert "2048 / 2 = 1024 tokens per slot" in out


def test_doctor_says_which_matmul_path_gives_rows_the_same_bits(tiny_model_dir: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from mlxchat.engine import device_kind
    from mlxchat.engine.cpu import kernels
    from tests.tiny_gguf import write_tiny_gguf

    def batching(model: Path) -> str:
        assert main(["doctor", "--model", str(model)]) == 0
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  batching"))

    library = "the BLAS" if device_kind() == "cpu" else "MLX's GPU matmul"
    assert f"(float32, full precision), though not bit for bit: {library} picks its kernel" in batching(tiny_model_dir)
    if kernels.status().active and device_kind() == "cpu":
        gguf = write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1")
        assert "match each prompt's alone, bit for bit (q4 (group 32) through mlxchat's kernels" in batching(gguf)


def test_doctor_refuses_slots_the_model_cannot_use_without_a_summary(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The tiny model is trained on 4096 tokens: 8 slots can never use a 40000-token total.
    assert main(["doctor", "--model", str(tiny_model_dir), "--ctx-size", "40000", "--parallel", "8"]) == 2
    out = capsys.readouterr().out
    assert "REFUSED: ctx_size = 40000 (--ctx-size) is more than the model can use" in out
    assert "set it to at most 32768" in out
    assert "tokens per slot" not in out  # no summary of a plan that could not run


@needs_console_script
def test_bad_config_file_exits_2_with_one_clear_message(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("parallel = 0\n")
    done = mlxchat("--config", str(config), "doctor")
    assert done.returncode == 2
    assert done.stderr.strip() == f"mlxchat: {config}: parallel = 0 is not allowed: must be at least 1"
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "/nonexistent/mlxchat.toml"], "/nonexistent/mlxchat.toml: config file not found"),
        (["doctor", "--parallel", "0"], "--parallel 0 is not allowed: must be at least 1"),
        (["doctor", "--parallel", "two"], "argument --parallel: invalid int value: 'two'"),
        (["bench", "--engines", "nope"], "'nope': choose from mlx-lm-sequential"),
        (["bench", "--slots", "1,0"], "0 is not allowed: must be at least 1"),
        (["bench", "--sampled", "--scenario", "long"], "leave it out with --scenario long"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_flags_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_missing_blas_library_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLXCHAT_BLAS", "/nonexistent/libblas.so")
    assert main(["doctor"]) == 2
    assert 'blas = "/nonexistent/libblas.so": no such file' in capsys.readouterr().err


def test_model_load_error_exits_1_with_its_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.gguf"
    assert main(["bench", "--model", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"mlxchat: {missing} does not exist")
    assert main(["doctor", "--model", str(missing)]) == 1
    assert f"ERROR: {missing} does not exist" in capsys.readouterr().out


def test_memory_figures_for_doctor() -> None:
    info = memory_info()
    assert info.total_bytes and info.available_bytes and 0 < info.available_bytes <= info.total_bytes
    meminfo = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\n"
    assert parse_meminfo(meminfo).available_bytes == 8000000 * 1024
    assert parse_meminfo("MemTotal: 4 kB\nMemFree: 1 kB\nCached: 2 kB\n").available_bytes == 3 * 1024
    vm_stat = (
        "Mach Virtual Memory Statistics: (page size of 16384 bytes)\n"
        "Pages free:                               10.\n"
        "Pages active:                            500.\n"
        "Pages inactive:                           20.\n"
        "Pages speculative:                         3.\n"
    )
    assert parse_vm_stat(vm_stat) == 33 * 16384


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_updating_line_on_a_terminal_and_a_line_per_stage_otherwise() -> None:
    steps = [Progress("Checking m.gguf", 1, 4), Progress("Checking m.gguf", 4, 4), Progress("Loading weights", 0, 0)]
    log = io.StringIO()
    with ConsoleProgress(log) as progress:
        for step in steps:
            progress(step)
    assert log.getvalue() == "Checking m.gguf...\nLoading weights...\n"

    terminal = Terminal()
    with ConsoleProgress(terminal) as progress:
        for step in steps:
            progress(step)
    text = terminal.getvalue()
    assert "\n" not in text and "\rChecking m.gguf...  25%" in text and "\rChecking m.gguf... 100%" in text
    assert text.endswith("\r" + " " * len("Loading weights...") + "\r")  # the line is cleared at the end



@needs_console_script
def test_without_a_terminal_the_chat_ui_says_it_needs_one_and_exits_2(tmp_path: Path) -> None:
    """With its input and output not a terminal the UI would draw into the file and wait for keys for ever."""
    with open(os.devnull) as nothing, open(tmp_path / "out", "w") as out:
        done = subprocess.run([str(CONSOLE_SCRIPT)], stdin=nothing, stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=60, env=dict(os.environ))
    assert done.returncode == 2 and "the chat UI needs a terminal" in done.stderr
    assert (tmp_path / "out").read_text() == ""
    # Commands that need no terminal still run without one (this one says there is nothing saved yet).
    assert "no chats have been saved yet" in mlxchat("chats").stderr


@needs_console_script
def test_a_model_that_does_not_exist_is_refused_before_the_ui(tmp_path: Path) -> None:
    """In a terminal (a pseudo-terminal here), a --model path that does not exist exits 2 before the UI starts."""
    import pty

    leader, follower = pty.openpty()
    try:
        done = subprocess.run([str(CONSOLE_SCRIPT), "--model", str(tmp_path / "nowhere")], stdin=follower,
                              stdout=follower, stderr=subprocess.PIPE, text=True, timeout=60, env=dict(os.environ))
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"mlxchat: {tmp_path / 'nowhere'} does not exist; give an existing MLX folder, "
                                   "a .gguf file or a Hub id.")

"""Shared fixtures: a tiny real model built on the fly, isolated config/cache/data dirs."""

from __future__ import annotations

from engine.blas import load_blas

load_blas("auto")  # before anything imports mlx.core, so the tests run on the optimized BLAS

from pathlib import Path

import pytest

from tests.tiny_model import build_tiny_model


@pytest.fixture(autouse=True)
def _isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keeps every test away from the user's real config, cache and data, and from the network."""
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    # Data is each test's own: an app started by one test must not reopen the chats of another.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    # The cache is shared by the session so a GGUF converted once is reused by later tests.
    monkeypatch.setenv("XDG_CACHE_HOME", str(base / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in [v for v in __import__("os").environ if v.startswith("MLXCHAT_")]:
        monkeypatch.delenv(var)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama MLX model folder with a trained BPE tokenizer and a chat template."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def ascii_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama with an ASCII-only vocabulary: its replies read cleanly in screenshots."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-ascii") / "tiny-ascii", ascii_only=True)

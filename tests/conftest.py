"""Shared fixtures: a tiny real model built on the fly, isolated config/cache/data dirs."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _installed_here() -> bool:
    """Whether the `mlxchat` Python would import is this checkout (`make setup` installs it editable)."""
    try:
        spec = importlib.util.find_spec("mlxchat.app")
    except ImportError:
        return False
    return spec is not None and spec.origin is not None and Path(spec.origin).resolve().is_relative_to(ROOT)


def _checkout_as_mlxchat() -> None:
    """Makes `mlxchat` this checkout, in the tests and in every interpreter they start, whatever is installed:
    a checkout that is not installed (`PYTHONPATH=$PWD python -m pytest`, as on a GPU machine), or a copy of
    the repository tested beside the installed one, tests itself.

    A one-line shim package `mlxchat` whose __path__ is the checkout root goes first on sys.path
    and, through PYTHONPATH, on the path of the interpreters tests start (before an installed copy,
    whose editable finder comes after sys.path).
    """
    if _installed_here():
        return
    shim = Path(tempfile.mkdtemp(prefix="mlxchat-shim-"))
    atexit.register(shutil.rmtree, shim, ignore_errors=True)
    (shim / "mlxchat").mkdir()
    (shim / "mlxchat" / "__init__.py").write_text(f"__path__ = [{str(ROOT)!r}]\n")
    sys.path.insert(0, str(shim))
    for name in [m for m in sys.modules if m == "mlxchat" or m.startswith("mlxchat.")]:
        del sys.modules[name]  # (another copy's, imported by a plugin before this file ran)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), str(ROOT), os.environ.get("PYTHONPATH")) if p)


_checkout_as_mlxchat()

from mlxchat.engine.cpu.blas import load_blas  # noqa: E402
from mlxchat.engine.devices import use_exact_matmuls  # noqa: E402

# Before anything imports mlx.core: the tests compare batched replies with solo ones, which
# needs float32 without TF32 on CUDA, and run on the optimized BLAS on a CPU.
use_exact_matmuls(True)
load_blas("auto")
if os.environ.get("MLXCHAT_NO_MLX_CACHE"):  # (make test-sanitize: MLX's buffer cache would hide overruns)
    import mlx.core as mx

    mx.set_cache_limit(0)
# Now, while MLXCHAT_KERNELS_FROM and MLXCHAT_ISA are still set (each test clears MLXCHAT_ variables): the build
# and the level they name are loaded (`MLXCHAT_ISA=avx2 make test` runs the suite on the AVX2 path).
from mlxchat.engine.cpu import kernels as _kernels  # noqa: E402

_kernels.status()

import pytest

from tests.servers import Server, serving_with_llama
from tests.tiny_model import build_tiny_model


@pytest.fixture(autouse=True)
def _isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keeps every test away from the user's real config, cache and data, and from the network.

    Config, data and saved KV are the test's own (the app writes them); the models cache is shared, below.
    """
    base = tmp_path_factory.getbasetemp()
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    # The cache is shared by the session so a GGUF converted once is reused by later tests.
    monkeypatch.setenv("XDG_CACHE_HOME", str(base / "cache"))
    # Saved KV found by another test's chats (the same tiny model, the same prompts) would be read back.
    monkeypatch.setattr("mlxchat.app.paths.kv_cache_dir", lambda: tmp_path / "kv")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in [v for v in __import__("os").environ if v.startswith("MLXCHAT_")]:
        monkeypatch.delenv(var)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama MLX model folder with a trained BPE tokenizer and a chat template."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


# A slot of the long model: a reply that fills it outlasts what a test does beside it.
LONG_CONTEXT = 65536


@pytest.fixture(scope="session")
def long_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama trained (its config says) on 65,536 tokens: the tiny model fills a 4,096-token slot in
    a few seconds, and a test that must act while a reply still runs needs a longer one."""
    import json

    path = tmp_path_factory.mktemp("tiny-long") / "tiny-long"
    shutil.copytree(tiny_model_dir, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": LONG_CONTEXT}, indent=2))
    return path


@pytest.fixture(scope="session")
def ascii_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama with an ASCII-only vocabulary: its replies read cleanly in screenshots."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-ascii") / "tiny-ascii", ascii_only=True)


@pytest.fixture(scope="session")
def ascii_gguf(ascii_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ASCII tiny llama as a float32 GGUF for llama-server (whose chat format reads its replies, and whose CPU
    code for float32 runs on every x86-64: its quantized code needs AVX-VNNI)."""
    from tests.tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(ascii_model_dir, tmp_path_factory.mktemp("gguf") / "tiny-ascii.gguf", "F32")


@pytest.fixture(scope="module")
def seeing_llama(ascii_gguf: Path, ascii_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Server]:
    """llama-server on the ASCII tiny llama with a tiny image projector (--mmproj): a real server that takes images."""
    import json

    from tests.tiny_mmproj import write_tiny_mmproj

    work = tmp_path_factory.mktemp("seeing-llama")
    width = json.loads((ascii_model_dir / "config.json").read_text())["hidden_size"]
    projector = write_tiny_mmproj(work / "mmproj.gguf", width)
    with serving_with_llama(ascii_gguf, work, "--mmproj", str(projector)) as server:
        yield server


@pytest.fixture(scope="module")
def blind_llama(ascii_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """llama-server on the ASCII tiny llama alone: its /props says it has no vision."""
    with serving_with_llama(ascii_gguf, tmp_path_factory.mktemp("blind-llama")) as server:
        yield server


@pytest.fixture(scope="session")
def endless_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama whose end token is outside its vocabulary: its replies run to max_tokens."""
    from tests.servers import endless_model

    return endless_model(tiny_model_dir, tmp_path_factory.mktemp("endless") / "tiny-endless")


@pytest.fixture(scope="session")
def reasoning_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The tiny reasoning model of a style (tests/tiny_reasoning.py), built once per run."""
    from tests.tiny_reasoning import build_reasoning_model

    built: dict[str, Path] = {}

    def folder(style: str) -> Path:
        if style not in built:
            built[style] = build_reasoning_model(tmp_path_factory.mktemp(f"reasoning-{style}") / style, style)
        return built[style]

    return folder


@pytest.fixture(scope="session")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model that calls a tool, then answers from its result (tests/tiny_tools.py)."""
    from tests.tiny_tools import build_tool_model

    return build_tool_model(tmp_path_factory.mktemp("tools") / "tiny-tools")


@pytest.fixture(scope="session")
def search_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model that searches for a tool, then calls it, then answers from its result (tests/tiny_tools.py)."""
    from tests.tiny_tools import build_search_model

    return build_search_model(tmp_path_factory.mktemp("search") / "tiny-search")


@pytest.fixture(scope="session")
def two_call_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny tool model's twin that calls the tool twice in one round (tests/tiny_tools.py)."""
    from tests.tiny_tools import build_two_call_model

    return build_two_call_model(tmp_path_factory.mktemp("two-calls") / "tiny-two-calls")

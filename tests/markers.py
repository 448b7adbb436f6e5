"""Skip markers for what a test needs of the machine: MLX on the CPU, or the installed console script.

The suite runs on a GPU machine too (from a checkout on PYTHONPATH, without `pip install`):
there the CPU-only paths and the console script are skipped, with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import pytest

CONSOLE_SCRIPT = Path(sys.executable).parent / "mlxchat"

needs_cpu = pytest.mark.skipif(
    mx.default_device().type != mx.cpu, reason="a CPU-only path: MLX's default device here is a GPU"
)
needs_console_script = pytest.mark.skipif(
    not CONSOLE_SCRIPT.exists(), reason="the mlxchat console script is not installed here (`pip install -e .` installs it)"
)

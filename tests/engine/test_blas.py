"""BLAS choice: what load_blas loads, and that blas_in_use reports what MLX really calls.

Loading order matters (a BLAS loaded after `import mlx.core` changes nothing), so each case
runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlxchat.engine.cpu.blas import BlasError, blas_in_use, find_optimized_blas, load_blas
from tests.markers import needs_cpu

pytestmark = needs_cpu

ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MLX on macOS uses Accelerate")


def in_fresh_python(code: str) -> dict[str, dict[str, str | None]]:
    """Runs `code` (which binds `results`, a dict of BlasInfo) in a new interpreter; returns them as dicts."""
    script = (
        "import json\nfrom dataclasses import asdict\nfrom mlxchat.engine.cpu.blas import load_blas, blas_in_use\n"
        f"{code}\nprint(json.dumps({{k: asdict(v) for k, v in results.items()}}))"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@linux_only
def test_auto_loads_the_optimized_blas_and_mlx_uses_it() -> None:
    found = find_optimized_blas()
    if found is None:
        pytest.skip("no OpenBLAS or MKL on this machine (make setup installs OpenBLAS)")
    results = in_fresh_python("results = {'loaded': load_blas('auto'), 'in_use': blas_in_use()}")
    assert results["loaded"]["path"] == found
    assert results["loaded"]["kind"] in ("openblas", "mkl")
    assert results["in_use"]["kind"] == results["loaded"]["kind"]
    assert Path(results["in_use"]["path"]).name == Path(found).name


@linux_only
def test_off_keeps_the_reference_blas() -> None:
    results = in_fresh_python("results = {'loaded': load_blas('off'), 'in_use': blas_in_use()}")
    assert results["loaded"]["kind"] == "reference" and results["loaded"]["path"] is None
    assert results["in_use"]["kind"] == "reference"
    assert "mlx_cpu.libs" in results["in_use"]["path"]


@linux_only
def test_a_path_loads_that_library() -> None:
    found = find_optimized_blas()
    if found is None:
        pytest.skip("no optimized BLAS on this machine to load by path")
    results = in_fresh_python(f"results = {{'loaded': load_blas({found!r}), 'in_use': blas_in_use()}}")
    assert results["loaded"]["path"] == found
    assert results["in_use"]["kind"] == results["loaded"]["kind"] != "reference"


@linux_only
def test_loading_after_mlx_is_too_late_and_says_so() -> None:
    results = in_fresh_python("import mlx.core\nresults = {'loaded': load_blas('auto')}")
    assert results["loaded"]["kind"] == "reference"
    assert "came too late" in results["loaded"]["note"]


def test_a_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "libnothing.so"
    with pytest.raises(BlasError, match=rf'blas = "{missing}": no such file \(use "auto", "off"'):
        load_blas(str(missing))


@linux_only
def test_the_test_suite_itself_runs_on_the_optimized_blas() -> None:
    # tests/conftest.py loads it before anything imports mlx.
    if find_optimized_blas() is None:
        pytest.skip("no optimized BLAS on this machine")
    assert not blas_in_use().is_reference

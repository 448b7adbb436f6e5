"""What the engine says about the machine (CPU model, vector extensions) and about exactness of batching."""

from __future__ import annotations

import os
import subprocess
import sys

from mlxchat.engine.devices import TF32_VARIABLE, batching_note, cpu_model, vector_extensions

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B14
flags\t\t: fpu sse sse2 avx avx2 fma f16c avx512f avx512bw avx512_vnni
"""


def test_cpu_model_and_vector_extensions_come_from_cpuinfo() -> None:
    assert cpu_model(CPUINFO) == "AMD EPYC 9B14"
    assert vector_extensions(CPUINFO) == ["avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni"]
    assert vector_extensions("") == []


def test_exact_turns_tf32_off_before_mlx_starts_and_says_when_too_late() -> None:
    code = (
        "import os, sys\nfrom mlxchat.engine.devices import use_exact_matmuls\n"
        "print(repr(use_exact_matmuls(False)), os.environ.get('MLX_ENABLE_TF32'))\n"
        "print(repr(use_exact_matmuls(True)), os.environ.get('MLX_ENABLE_TF32'))\n"
        "os.environ.pop('MLX_ENABLE_TF32')\nimport mlx.core\n"
        "print(use_exact_matmuls(True))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != TF32_VARIABLE}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["'' None", "'' 0", "exact = true came too late: mlx.core was already imported"]


def test_batching_note_says_where_batched_replies_can_differ(monkeypatch) -> None:
    monkeypatch.setenv(TF32_VARIABLE, "0")
    for kind, dtype in (("cpu", "float32"), ("cuda", "float32"), ("metal", "float32")):
        assert batching_note(kind, dtype).startswith("batched replies match"), kind
    assert "bfloat16 on a GPU" in batching_note("cuda", "bfloat16")
    assert "q4 (group 32) on a GPU" in batching_note("metal", "q4 (group 32)")
    # Quantized layers through the compiled kernels: a row's sums do not depend on the rows beside it, to the bit
    # (tests/engine/test_batch_invariance.py); float32 through the BLAS only to rounding.
    assert batching_note("cpu", "q4/q8 (group 32)", kernels=True).startswith(
        "batched replies match each prompt's alone, bit for bit (q4/q8 (group 32) through mlxchat's kernels")
    int8 = batching_note("cpu", "q4/q8 (group 32), int8 activations", kernels=True, int8=True)
    assert int8.startswith("batched replies match each prompt's alone, bit for bit")
    assert "differ from the float32 model's" in int8
    assert "though not bit for bit: the BLAS picks its kernel by the number of rows" in batching_note("cpu", "float32")
    assert "q4/q8 (group 32) on the CPU" in batching_note("cpu", "q4/q8 (group 32)")
    monkeypatch.delenv(TF32_VARIABLE)
    assert "TF32" in batching_note("cuda", "float32")
    assert batching_note("metal", "float32").startswith("batched replies match")

"""The kernels' x86 levels: one module each, the same bits from each, the level MLXCHAT_ISA names, and what is
built where (levels.py). `make test` builds every level; a level not built here is skipped, saying so."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from mlxchat.engine.cpu import kernels
from mlxchat.engine.cpu.kernels import levels
from tests.markers import needs_cpu

pytestmark = [needs_cpu, pytest.mark.skipif(not levels.x86(), reason="one module, _ext, off x86")]

V3 = sorted(levels.NEEDS["avx2"])
V4 = V3 + ["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"]


def module(level: str):
    if level not in levels.runnable():
        pytest.skip(f"this CPU does not run {level}")
    if level not in kernels.built_levels():
        pytest.skip(f"{level} is not built here (`make test` builds every level)")
    return importlib.import_module(f"mlxchat.engine.cpu.kernels.{levels.module_name(level)}")


def outputs(ext) -> list:
    """Every kernel's outputs on fixed inputs: matmuls over each weight form (scales float32 and float16) at 1 to 4,
    8, 12 and 21 rows (registers, by each count of columns at once, panels of 8 and 4, outer products), attention over
    each K/V type at decode and prefill, norms, RoPE, top-k."""
    import mlx.core as mx

    out = []
    with mx.stream(mx.cpu):
        w = mx.random.normal((96, 256), key=mx.random.key(1))
        for rows in (1, 2, 3, 4, 8, 12, 21):
            x = mx.random.normal((rows, 256), key=mx.random.key(rows))
            for bits in (4, 8):
                out += ext.weights_matmul(x, list(mx.quantize(w, 32, bits)), bits, 32, False, 2)
                out += ext.weights_matmul(x, list(mx.quantize(w.astype(mx.float16), 32, bits)), bits, 32, False, 2)
                out += ext.weights_matmul(x, list(mx.quantize(w, 64, bits)) * 2, bits, 64, True, 2)
            for dtype in (mx.float16, mx.bfloat16):
                out += ext.weights_matmul(x, [w.astype(dtype)], 16, 0, False, 2)
        keys = mx.random.normal((3, 2, 300, 64), key=mx.random.key(5))
        values = mx.random.normal((3, 2, 300, 64), key=mx.random.key(6))
        for stored in (lambda a: [a], lambda a: [a.astype(mx.float16)], lambda a: [a.astype(mx.bfloat16)],
                       lambda a: list(mx.quantize(a, 32, 8))):
            for new in (1, 37):
                q = mx.random.normal((2, 4, new, 64), key=mx.random.key(new))
                out.append(ext.slot_attention(q, stored(keys), stored(values), mx.array([2, 0]),
                                              mx.array([290, 120]), 0.125, 2))
        x = mx.random.normal((5, 576), key=mx.random.key(7))
        weight = mx.random.normal((576,), key=mx.random.key(8))
        out += [ext.rms_norm(x, weight, 1e-5), ext.swiglu(x, x * 0.5), *ext.add_rms_norm(x, x, weight, 1e-5)]
        out += list(ext.top_k(x, 7, 2))
        mx.eval(out)
    return out


def test_avx2_gives_the_bits_of_avx512():
    # Both fuse their multiply-adds (FMA) and sum in the same order: every kernel, every row, the same bits.
    avx512, avx2 = module("avx512"), module("avx2")
    import mlx.core as mx

    for i, (want, got) in enumerate(zip(outputs(avx512), outputs(avx2), strict=True)):
        assert want.dtype == got.dtype and want.shape == got.shape
        assert mx.array_equal(want, got).item(), f"output {i} differs: max {mx.abs(want - got).max().item():.3g}"


def test_the_portable_level_rounds_apart_but_a_row_is_still_the_same_bits_whatever_shares_its_call():
    # The x86-64 baseline has no FMA: its products are rounded before they are added, so its last bits part from
    # the vector levels' (the README says so); within it, a row does not depend on the rows beside it.
    portable = module("portable")
    import mlx.core as mx

    for i, (want, got) in enumerate(zip(outputs(module(levels.runnable()[0])), outputs(portable), strict=True)):
        assert mx.allclose(want, got, rtol=1e-4, atol=1e-4).item(), f"output {i}: {mx.abs(want - got).max().item()}"
    with mx.stream(mx.cpu):
        w = mx.quantize(mx.random.normal((96, 256), key=mx.random.key(1)), 32, 4)
        rows = mx.random.normal((21, 256), key=mx.random.key(2))
        alone = [portable.weights_matmul(rows[i : i + 1], list(w), 4, 32, False, 2)[0] for i in range(21)]
        together = portable.weights_matmul(rows, list(w), 4, 32, False, 2)[0]
        assert mx.array_equal(mx.concatenate(alone), together).item()


def isa_in_a_new_process(asked: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLXCHAT_")} | {levels.RUN_VARIABLE: asked}
    script = "from mlxchat.engine.cpu import kernels; print(kernels.status().detail)"
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                          timeout=120).stdout


@pytest.mark.parametrize("asked, isa", [("avx2", "x86-64-v3 (AVX2 + FMA)"), ("portable", "x86-64 (portable)")])
def test_mlxchat_isa_runs_the_level_it_names_and_says_so(asked: str, isa: str):
    module(asked)
    detail = isa_in_a_new_process(asked)
    assert f"{isa} code path ({levels.RUN_VARIABLE}={asked}, built here: " in detail


def test_a_level_that_cannot_run_is_refused_in_words(monkeypatch):
    monkeypatch.setattr(levels, "runnable", lambda flags=None: ["avx2", "portable"])
    monkeypatch.setattr(kernels, "built_levels", lambda: ["avx512"])
    monkeypatch.setenv(levels.RUN_VARIABLE, "avx512")
    assert kernels._module_name() == (None, "MLXCHAT_ISA=avx512: this CPU cannot run that path (its best is avx2)")
    # A checkout built on an AVX-512 machine, run on an AVX2 one: MLX's own operations, never an illegal instruction.
    monkeypatch.setenv(levels.RUN_VARIABLE, "auto")
    name, why = kernels._module_name()
    assert name is None and why.startswith("built for avx512 only, which this CPU cannot run (its best is avx2")
    monkeypatch.setenv(levels.RUN_VARIABLE, "avx3")
    assert kernels._module_name() == (None, "MLXCHAT_ISA=avx3 is not one of auto, avx512, avx2, portable")


def test_levels_read_from_the_cpu_flags_and_the_build_setting():
    assert levels.runnable(set(V4)) == ["avx512", "avx2", "portable"]
    assert levels.runnable(set(V3)) == ["avx2", "portable"]
    assert levels.runnable(set(V4) - {"movbe"}) == ["portable"]  # AVX-512 without all of x86-64-v3: the baseline
    assert levels.to_build(None, in_place=False) == ["avx512", "avx2", "portable"]
    assert levels.to_build(None, in_place=True) == levels.runnable()[:1]
    assert levels.to_build("avx2, portable", in_place=True) == ["avx2", "portable"]
    with pytest.raises(ValueError, match="MLXCHAT_KERNEL_LEVELS='sse9': write native, all, or levels among"):
        levels.to_build("sse9", in_place=True)

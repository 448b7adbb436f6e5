"""The x86 levels the compiled kernels are built for, one module each, and which of them this CPU runs.

Plain Python with no import of the package or of MLX: setup.py loads this file by its path to choose which
modules to build (this CPU's alone for an install in place, every level for a wheel).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# Best first. Each module is built whole with its -march (CMakeLists.txt): x86-64-v4, x86-64-v3, the baseline.
LEVELS = ("avx512", "avx2", "portable")
# What each level needs, in /proc/cpuinfo's names: GCC's x86-64-v3 (v2's SSE3-4.2, POPCNT, CX16, LAHF; then AVX,
# AVX2, BMI1/2, F16C, FMA, LZCNT, MOVBE, XSAVE) and x86-64-v4 (v3 and AVX-512 F, BW, CD, DQ, VL).
_V3 = {"pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm", "avx", "avx2", "bmi1", "bmi2", "f16c",
       "fma", "abm", "movbe", "xsave"}
NEEDS = {"avx512": _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}, "avx2": _V3, "portable": set()}
# Which levels a build makes (setup.py): "native" (this CPU's best), "all", or levels separated by commas.
BUILD_VARIABLE = "MLXCHAT_KERNEL_LEVELS"
# Which level's module runs (kernels.status): "auto" (the best one built that this CPU runs) or a level.
RUN_VARIABLE = "MLXCHAT_ISA"


def x86() -> bool:
    """Whether this machine is x86-64, where the kernels come as one module per level."""
    return platform.machine().lower() in ("x86_64", "amd64")


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The flags the CPU reports in /proc/cpuinfo (empty where there is none)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def runnable(flags: set[str] | None = None) -> list[str]:
    """The levels this CPU runs, best first (the portable one always)."""
    flags = cpu_flags() if flags is None else flags
    return [level for level in LEVELS if NEEDS[level] <= flags]


def module_name(level: str) -> str:
    """The kernels' module built for `level` (CMakeLists.txt names it so)."""
    return f"_ext_{level}"


def to_build(setting: str | None, in_place: bool) -> list[str]:
    """The levels a build makes: `setting` (MLXCHAT_KERNEL_LEVELS) if given, else this CPU's best for a build
    in place and every level for a wheel. Raises ValueError, saying what to write, for a setting it cannot read."""
    setting = (setting or ("native" if in_place else "all")).strip().lower()
    if setting == "all":
        return list(LEVELS)
    if setting == "native":
        return runnable()[:1]
    levels = [part.strip() for part in setting.split(",") if part.strip()]
    unknown = [level for level in levels if level not in LEVELS]
    if unknown or not levels:
        raise ValueError(f"{BUILD_VARIABLE}={setting!r}: write native, all, or levels among "
                         f"{', '.join(LEVELS)} separated by commas")
    return levels


def asked() -> str:
    """The level MLXCHAT_ISA asks for, or "auto"."""
    return os.environ.get(RUN_VARIABLE, "auto").strip().lower() or "auto"

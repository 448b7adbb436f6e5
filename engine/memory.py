"""How much memory the machine has and is available, and the pre-flight check of a model and its KV cache."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class MemoryInfo:
    """Physical memory in bytes; None where the platform would not say."""

    total_bytes: int | None
    available_bytes: int | None


# Activations, logits and allocator slack on top of weights and KV. Measured: SmolLM2 in float32
# with 8 slots peaks at 693 MiB for 603 MiB of weights and KV (`mlxchat bench`).
WORKING_FRACTION = 0.15

# The parked store's default budget: 1 GiB holds about 23,000 tokens of the default model
# (SmolLM2-135M, 45 KiB of K/V per token in float32 on a CPU): the whole default 8192-token
# context almost three times over; and 8,000 tokens of an 8B model with grouped-query attention
# (128 KiB per token in float16): a few long chats, for less memory than their weights.
DEFAULT_PARK_BUDGET_MB = 1024
DEFAULT_DISK_KV_MB = 4096


@dataclass(frozen=True)
class MemoryCheck:
    """Whether a model and its KV cache fit, with the figures; a warning to show or an error to refuse on."""

    need_bytes: int
    available_bytes: int | None
    total_bytes: int | None
    warning: str | None = None
    error: str | None = None


def check_memory(weights_bytes: int, kv_bytes: int, memory: MemoryInfo | None = None) -> MemoryCheck:
    """The pre-flight check: weights + KV + working memory against what is available and what exists.

    Past the available memory it warns (the system will swap); past the machine's total it refuses.
    """
    memory = memory or memory_info()
    need = int((weights_bytes + kv_bytes) * (1 + WORKING_FRACTION))
    parts = f"the weights ({format_bytes(weights_bytes)}) and KV cache ({format_bytes(kv_bytes)}) need {format_bytes(need)}"
    check = MemoryCheck(need, memory.available_bytes, memory.total_bytes)
    if memory.total_bytes is not None and need > memory.total_bytes:
        return replace(
            check,
            error=f"{parts} but this machine has {format_bytes(memory.total_bytes)}: "
            "use a smaller total context or a smaller model",
        )
    if memory.available_bytes is not None and need > memory.available_bytes:
        return replace(
            check,
            warning=f"{parts} but {format_bytes(memory.available_bytes)} is available: expect swapping; "
            "close other programs or use a smaller total context",
        )
    return check


def format_bytes(n: int) -> str:
    """`n` bytes in the largest binary unit that keeps it at 1 or more, e.g. "93.8 MiB"."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, unit = float(n), 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{value:.1f} {units[unit]}"


def memory_info() -> MemoryInfo:
    """The machine's total memory and the memory available to a new allocation without swapping."""
    if sys.platform.startswith("linux"):
        try:
            return parse_meminfo(Path("/proc/meminfo").read_text())
        except OSError:
            pass
    elif sys.platform == "darwin":
        try:
            total = int(_run(["sysctl", "-n", "hw.memsize"]))
            return MemoryInfo(total, parse_vm_stat(_run(["vm_stat"])))
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return _sysconf_memory()


def parse_meminfo(text: str) -> MemoryInfo:
    """MemTotal and MemAvailable from the text of Linux's /proc/meminfo (values in kB)."""
    fields = {m[1]: int(m[2]) * 1024 for m in re.finditer(r"^(\w+):\s+(\d+) kB$", text, re.MULTILINE)}
    # Kernels before 3.14 have no MemAvailable; free + page cache is the usual stand-in.
    available = fields.get("MemAvailable")
    if available is None and "MemFree" in fields:
        available = fields["MemFree"] + fields.get("Cached", 0)
    return MemoryInfo(fields.get("MemTotal"), available)


def parse_vm_stat(text: str) -> int | None:
    """Bytes available on macOS from `vm_stat` output: free, inactive and speculative pages."""
    page = re.search(r"page size of (\d+) bytes", text)
    if page is None:
        return None
    counts = {m[1]: int(m[2]) for m in re.finditer(r"^Pages ([\w ]+):\s+(\d+)\.$", text, re.MULTILINE)}
    # Inactive and speculative pages are reclaimed on demand, as Activity Monitor counts them.
    pages = sum(counts.get(name, 0) for name in ("free", "inactive", "speculative"))
    return pages * int(page[1])


def _run(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=5).stdout


def _sysconf_memory() -> MemoryInfo:
    """Total and free physical pages from sysconf, where the platform offers them."""

    def pages(name: str) -> int | None:
        try:
            value = os.sysconf(name)
        except (ValueError, OSError):
            return None
        return value if value > 0 else None

    size = pages("SC_PAGE_SIZE")
    total, free = pages("SC_PHYS_PAGES"), pages("SC_AVPHYS_PAGES")
    return MemoryInfo(total * size if total and size else None, free * size if free and size else None)

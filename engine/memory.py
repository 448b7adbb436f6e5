"""Reads how much memory the machine has and how much is available, for the pre-flight check and doctor."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MemoryInfo:
    """Physical memory in bytes; None where the platform would not say."""

    total_bytes: int | None
    available_bytes: int | None


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

"""Chooses the BLAS that MLX's CPU backend multiplies matrices with, and reports which one it really uses.

The `mlx[cpu]` wheel for Linux links a bundled reference (netlib) BLAS. A CBLAS loaded with
RTLD_GLOBAL before the first `import mlx.core` takes precedence when libmlx binds its
`cblas_*` symbols, so `load_blas` must run before anything imports mlx. Loaded later, it
changes nothing. This module never imports mlx at import time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import mmap
import os
import platform
import shutil
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from mlxchat.engine.cpu.priority import thread_ids

BlasKind = Literal["mkl", "openblas", "custom", "reference", "accelerate"]
# The routine float32 matmuls go through; whichever library provides it does the work.
PROBE_SYMBOL = b"cblas_sgemm"
# The threads the loaded BLAS started as it loaded (OpenBLAS does; MKL starts its own later, from
# the thread that first multiplies): the engine lowers their priority (engine.cpu.priority).
_workers: tuple[int, ...] = ()
OPENBLAS_GLOBS = ("/usr/lib/*/openblas-pthread/libopenblas.so.0", "/usr/lib/*/libopenblas.so*", "/usr/lib64/libopenblas*.so*")


class BlasError(Exception):
    """The configured BLAS cannot be loaded; the message says which and why."""


@dataclass(frozen=True)
class BlasInfo:
    """Which BLAS library serves MLX's CPU matmuls, and what to do about it when it is the slow one."""

    kind: BlasKind
    path: str | None
    note: str = ""

    @property
    def is_reference(self) -> bool:
        """Whether this is the unoptimized reference BLAS, several times slower for decoding."""
        return self.kind == "reference"

    def describe(self) -> str:
        """One line for humans: the kind, the library and the note."""
        where = f" ({self.path})" if self.path else ""
        note = f" - {self.note}" if self.note else ""
        return f"{self.kind}{where}{note}"


def load_blas(choice: str) -> BlasInfo:
    """Loads the BLAS `choice` names ("auto", "off" or a library path) for MLX to use.

    Must run before the first `import mlx.core`; when mlx.core is already imported it loads
    nothing and returns the library MLX really uses, with a note saying it came too late.
    Raises BlasError when `choice` is a path that does not exist or does not load.
    """
    if sys.platform == "darwin":
        return BlasInfo("accelerate", None, "MLX on macOS uses Accelerate and Metal")
    path: str | None = None
    if choice not in ("auto", "off"):
        path = str(Path(choice).expanduser())
        if not Path(path).is_file():
            raise BlasError(f'blas = "{choice}": no such file (use "auto", "off" or the path of a CBLAS library)')
    if "mlx.core" in sys.modules:
        in_use = blas_in_use()
        return BlasInfo(in_use.kind, in_use.path, f'blas = "{choice}" came too late: mlx.core was already imported')
    if choice == "off":
        return BlasInfo("reference", None, 'blas = "off": MLX keeps its bundled reference BLAS')
    if path is None:
        path = find_optimized_blas()
        if path is None:
            return BlasInfo("reference", None, f"no optimized BLAS found; install one with: {fix_command()}")
    before = thread_ids()
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise BlasError(f'blas = "{choice}": the library does not load: {exc}') from None
    global _workers
    _workers = tuple(sorted(thread_ids() - before))
    return BlasInfo(_kind_of(path), path)


def blas_workers() -> tuple[int, ...]:
    """The kernel's ids of the threads the BLAS loaded by `load_blas` started as it loaded."""
    return _workers


def find_optimized_blas() -> str | None:
    """The best CBLAS on this machine: Intel MKL in this environment, then the system OpenBLAS."""
    mkl = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
    if mkl:
        return mkl[0]
    for pattern in OPENBLAS_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return ctypes.util.find_library("openblas")


def remedy() -> str:
    """The one step that gets MLX an optimized BLAS here: choose "auto" if one is installed, else install one."""
    if find_optimized_blas():
        return 'set blas = "auto" in the config (or run with MLXCHAT_BLAS=auto)'
    return fix_command()


def fix_command() -> str:
    """The one command that installs an optimized BLAS for MLX on this machine."""
    if shutil.which("apt-get"):
        return "sudo apt-get install libopenblas0-pthread"
    if platform.machine() in ("x86_64", "AMD64"):
        return f"{sys.executable} -m pip install mkl"
    return "install OpenBLAS with your system's package manager"


def blas_in_use() -> BlasInfo:
    """The library that really provides MLX's `cblas_sgemm` in this process (imports mlx.core)."""
    import mlx.core as mx

    if sys.platform == "darwin":
        return BlasInfo("accelerate", None)
    # libmlx binds its BLAS symbols lazily: one float32 matmul makes sure the binding happened.
    mx.eval(mx.ones((2, 2), dtype=mx.float32) @ mx.ones((2, 2), dtype=mx.float32))
    libmlx = _loaded_library("libmlx.so")
    path = _bound_symbol_library(libmlx, PROBE_SYMBOL) if libmlx else None
    if path is None:
        return BlasInfo("custom", None, "could not tell which library provides cblas_sgemm")
    return BlasInfo(_kind_of(path), path)


def _kind_of(path: str) -> BlasKind:
    """Names the library at `path` from its resolved file name."""
    real = os.path.realpath(path)
    name = os.path.basename(real).lower()
    if "mkl" in name:
        return "mkl"
    if "openblas" in real.lower():
        return "openblas"
    # The wheel's bundled copy (mlx_cpu.libs) and Debian's netlib package (.../blas/libblas.so.3).
    if name.startswith("libblas") and ("mlx_cpu.libs" in real or "/blas/" in real):
        return "reference"
    return "custom"


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _library_at(address: int) -> tuple[str, int] | None:
    """The path and load base of the shared library that contains `address` (dladdr)."""
    dladdr = ctypes.CDLL(None).dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    info = _DlInfo()
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.normpath(os.fsdecode(info.dli_fname)), int(info.dli_fbase or 0)


def _loaded_library(name: str) -> tuple[str, int] | None:
    """The path and load base of the loaded shared library called `name` (from /proc/self/maps)."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    for line in maps:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and os.path.basename(parts[5]) == name and int(parts[2], 16) == 0:
            return parts[5], int(parts[0].split("-")[0], 16)
    return None


def _bound_symbol_library(library: tuple[str, int], symbol: bytes) -> str | None:
    """Which library `library`'s reference to `symbol` is bound to, read from its GOT entry."""
    path, base = library
    slots = _got_slots(path, symbol)
    for offset in slots:
        target = ctypes.c_void_p.from_address(base + offset).value
        found = _library_at(target) if target else None
        # A slot still pointing into the library itself is an unresolved lazy PLT entry.
        if found and os.path.realpath(found[0]) != os.path.realpath(path):
            return found[0]
    return None


def _got_slots(path: str, symbol: bytes) -> list[int]:
    """The offsets of the GOT entries that hold `symbol`'s address in the ELF64 library at `path`."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as elf:
        if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
            return []  # only 64-bit little-endian ELF (x86_64, aarch64) is read
        (shoff,) = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
        sht_rela, sht_dynsym = 4, 11
        dynsym_index = next((i for i, s in enumerate(sections) if s[1] == sht_dynsym), None)
        if dynsym_index is None:
            return []
        dynsym = sections[dynsym_index]
        strtab = sections[dynsym[6]]
        wanted = None
        for index, (st_name, *_rest) in enumerate(struct.iter_unpack("<IBBHQQ", elf[dynsym[4] : dynsym[4] + dynsym[5]])):
            start = strtab[4] + st_name
            if elf[start : start + len(symbol) + 1] == symbol + b"\0":
                wanted = index
                break
        if wanted is None:
            return []
        return [
            r_offset
            for s in sections
            if s[1] == sht_rela and s[6] == dynsym_index
            for r_offset, r_info, _addend in struct.iter_unpack("<QQq", elf[s[4] : s[4] + s[5]])
            if r_info >> 32 == wanted
        ]


class SingleThreadedBlas:
    """Holds the loaded BLAS at one thread, for code that splits its matmuls across the cores itself.

    OpenBLAS and MKL are set through their own calls; other libraries are left as they are.
    Only call it when no matmul is running: the libraries do not expect the count to change mid-call.
    """

    def __init__(self) -> None:
        self._saved: int | None = None
        self._calls = _thread_calls()  # looked up once: hold and release run between engine steps

    def hold(self) -> None:
        """Sets one thread, remembering the count to give back (does nothing while already held)."""
        if self._saved is None and self._calls is not None:
            get, set_ = self._calls
            self._saved = get()
            set_(1)

    def release(self) -> None:
        """Gives the BLAS back the thread count it had before `hold`."""
        if self._saved is not None and self._calls is not None:
            self._calls[1](self._saved)
            self._saved = None


def _thread_calls() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """(get, set) of the loaded BLAS's thread count, found among the process's global symbols."""
    process = ctypes.CDLL(None)
    # MKL's C calls are the capitalised ones: its lower-case names are Fortran's, taking pointers.
    for get, set_ in (
        ("openblas_get_num_threads", "openblas_set_num_threads"),
        ("MKL_Get_Max_Threads", "MKL_Set_Num_Threads"),
    ):
        if hasattr(process, get) and hasattr(process, set_):
            return getattr(process, get), getattr(process, set_)
    return None

"""Saved KV on disk: parked conversations written under the cache folder and found again after a restart.

Each entry is one safetensors file: every layer's saved state for a token history, with the
history, the model's key and the format in its metadata. Files are private (0600 in a 0700 folder
per model key, under a root its caller keeps private: the app's start does); the whole tier is bounded in bytes, least recently used
first. A background thread writes them (the engine thread only hands over evaluated arrays), and
closing waits for the writes in flight, with a bound. A file that is damaged, truncated, from
another model or another format is ignored and removed, with a note.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.utils import common_prefix_len

from mlxchat.engine.memory import format_bytes

FORMAT = "mlxchat-kv-1"
FOLDER_MODE, FILE_MODE = 0o700, 0o600  # (a umask can only narrow them)
SUFFIX = ".safetensors"
# safetensors' names for the dtypes a KV cache holds.
DTYPES = {mx.float32: "F32", mx.float16: "F16", mx.bfloat16: "BF16", mx.int32: "I32", mx.uint32: "U32"}
HEADER_LIMIT = 64 * 2**20  # a larger header is not one of ours
# A new entry supersedes an older one whose history it shares this much of: the same chat, moved on
# (its last reply, as the template renders it again, may tokenize otherwise than it was generated).
SUPERSEDES = 0.9


@dataclass
class DiskEntry:
    """One saved history on disk."""

    path: Path
    tokens: list[int]
    nbytes: int


def key_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class DiskTier:
    """The saved-KV files of one model (`model_key`) under `root`, within `budget` bytes for all models."""

    def __init__(self, root: Path, budget: int, model_key: str) -> None:
        self.root = root
        self.budget = budget
        self.model_key = model_key
        self.folder = root / key_digest(model_key)
        self.entries: dict[str, DiskEntry] = {}
        self.notes: list[str] = []  # files ignored and removed, said to the user
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, list[int], list[tuple[str, mx.array, str]], Any] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        if budget > 0:
            self.folder.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
            self._scan()

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    # ---- writing (the engine thread hands over; the writer thread writes) ----

    def write(self, tokens: list[int], state: list[Any]) -> None:
        """Saves `state` (store.save's, evaluated) for the history `tokens`, in the background."""
        if not self.enabled or not tokens:
            return
        arrays: list[tuple[str, mx.array]] = []
        structure = _flatten(state, arrays)
        # The writer reads raw bytes: bfloat16, which Python's buffer protocol lacks, goes as uint16.
        raw = [(name, a.view(mx.uint16) if a.dtype == mx.bfloat16 else a, DTYPES[a.dtype]) for name, a in arrays]
        mx.eval([a for _, a, _ in raw])
        if sum(a.nbytes for _, a, _ in raw) > self.budget:
            return
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="mlxchat-kv-disk", daemon=True)
            self._writer.start()
        self._queue.put((key_digest(self.model_key + repr(tokens)), list(tokens), raw, structure))

    def close(self, timeout: float) -> bool:
        """Waits up to `timeout` seconds for the writes in flight; False if some were left unwritten."""
        if self._writer is None:
            return True
        self._queue.put(None)
        self._writer.join(timeout)
        return not self._writer.is_alive()

    def _write_loop(self) -> None:
        while (job := self._queue.get()) is not None:
            name, tokens, arrays, structure = job
            try:
                path = self._write_file(name, tokens, arrays, structure)
            except OSError as exc:
                self._note(f"could not save KV to disk ({exc.strerror or exc}); the chat is prefilled next time")
                continue
            with self._lock:
                # An entry this one (nearly) extends holds nothing worth its space.
                for key, old in list(self.entries.items()):
                    if key != name and common_prefix_len(old.tokens, tokens) >= SUPERSEDES * len(old.tokens):
                        _remove(old.path)
                        del self.entries[key]
                self.entries[name] = DiskEntry(path, tokens, path.stat().st_size)
                self._evict()

    def _write_file(self, name: str, tokens: list[int], arrays: list[tuple[str, mx.array, str]], structure: Any) -> Path:
        header: dict[str, Any] = {
            "__metadata__": {
                "format": FORMAT,
                "model": self.model_key,
                "tokens": json.dumps(tokens),
                "structure": json.dumps(structure),
            }
        }
        offset = 0
        for key, array, dtype in arrays:
            header[key] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
            offset += array.nbytes
        head = json.dumps(header).encode()
        head += b" " * (-len(head) % 8)
        path = self.folder / f"{name}{SUFFIX}"
        partial = self.folder / f".{name}.{os.getpid()}.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # exactly: the umask may have taken more than group and others
            with os.fdopen(fd, "wb") as out:
                out.write(struct.pack("<Q", len(head)) + head)
                for _, array, _ in arrays:
                    out.write(memoryview(array).cast("B"))
            os.replace(partial, path)
        except BaseException:
            _remove(partial)
            raise
        return path

    def _evict(self) -> None:
        """Least recently used files (of every model under the root) go until the tier is within budget."""
        files = sorted(self.root.glob(f"*/*{SUFFIX}"), key=_used)
        total = sum(_size(f) for f in files)
        for f in files:
            if total <= self.budget:
                break
            total -= _size(f)
            _remove(f)
            self.entries = {k: e for k, e in self.entries.items() if e.path != f}

    # ---- finding and loading (the engine thread) ----

    def best(self, prompt: list[int], limit: int) -> tuple[DiskEntry | None, int]:
        """The saved history sharing the longest prefix with `prompt` (at most `limit` tokens), and that length."""
        best: tuple[DiskEntry | None, int] = (None, 0)
        with self._lock:
            for entry in self.entries.values():
                n = min(common_prefix_len(entry.tokens, prompt), limit)
                if n > best[1]:
                    best = (entry, n)
        return best

    def load(self, entry: DiskEntry) -> list[Any] | None:
        """The saved state of `entry`, or None (the file is removed, with a note) when it cannot be used."""
        try:
            arrays, metadata = mx.load(str(entry.path), return_metadata=True)
            state = self._check(metadata, entry.path) and _unflatten(json.loads(metadata["structure"]), arrays)
        except Exception as exc:  # anything unreadable is removed, never used
            state = None
            self._note(f"ignored and removed a damaged saved KV file ({entry.path.name}: {exc})")
        if not state:
            self._forget(entry)
            return None
        os.utime(entry.path)  # just used: last to be evicted
        return state

    # ---- the folder ----

    def _scan(self) -> None:
        """Reads every file's header: ours are indexed, the rest removed with a note; leftovers of a crash go."""
        for partial in self.folder.glob(".*.partial"):
            _remove(partial)
        for path in sorted(self.folder.glob(f"*{SUFFIX}")):
            try:
                metadata = _read_metadata(path)
                if not self._check(metadata, path):
                    _remove(path)
                    continue
                tokens = json.loads(metadata["tokens"])
            except (OSError, ValueError, KeyError, struct.error) as exc:
                self._note(f"ignored and removed a damaged saved KV file ({path.name}: {exc})")
                _remove(path)
                continue
            self.entries[path.name.removesuffix(SUFFIX)] = DiskEntry(path, tokens, _size(path))

    def _check(self, metadata: dict[str, str], path: Path) -> bool:
        """Whether a file's metadata is this format's and this model's; notes why not."""
        if metadata.get("format") != FORMAT:
            self._note(f"ignored and removed a saved KV file of another format ({path.name})")
            return False
        if metadata.get("model") != self.model_key:
            self._note(f"ignored and removed a saved KV file of another model ({path.name})")
            return False
        return True

    def _forget(self, entry: DiskEntry) -> None:
        _remove(entry.path)
        with self._lock:
            self.entries = {k: e for k, e in self.entries.items() if e.path != entry.path}

    def said(self) -> tuple[str, ...]:
        """The notes so far (safe from any thread)."""
        with self._lock:
            return tuple(self.notes)

    def _note(self, text: str) -> None:
        with self._lock:
            self.notes.append(text)

    def describe(self) -> str:
        """A line for the inspector: entries, bytes and budget (safe from any thread)."""
        with self._lock:
            count, used = len(self.entries), sum(e.nbytes for e in self.entries.values())
        return f"{count} · {format_bytes(used)} / {format_bytes(self.budget)}"


def _read_metadata(path: Path) -> dict[str, str]:
    """A safetensors file's metadata, checking that its header and data are whole."""
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > HEADER_LIMIT:
            raise ValueError("not a saved KV file")
        header = json.loads(f.read(size))
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if path.stat().st_size != 8 + size + end:
        raise ValueError("truncated")
    return header["__metadata__"]


def _flatten(state: Any, out: list[tuple[str, mx.array]]) -> Any:
    """The nesting of lists, tuples and Nones around the arrays of `state`, which go to `out` by name."""
    if state is None:
        return None
    if isinstance(state, (list, tuple)):
        return {"list" if isinstance(state, list) else "tuple": [_flatten(part, out) for part in state]}
    name = f"a{len(out)}"
    out.append((name, state))
    return name


def _unflatten(structure: Any, arrays: dict[str, mx.array]) -> Any:
    if structure is None:
        return None
    if isinstance(structure, str):
        return arrays[structure]
    if "list" in structure:
        return [_unflatten(part, arrays) for part in structure["list"]]
    return tuple(_unflatten(part, arrays) for part in structure["tuple"])


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _used(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass

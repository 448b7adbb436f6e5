"""A vision tower read a slice at a time while other slots stream, as a long prompt is read in chunks.

A tower is one call (the model's `get_input_embeddings`) through mlx-vlm's own layers: it cannot be cut into chunks
as a prompt's tokens are, but its encoder is a list of layers. `slice_tower_layers` makes each of those layers, when
run by a `TowerSlices` thread, evaluate its output and stop there once its slice's time is spent; the engine thread
waits while the tower's thread runs, so only one of them drives MLX at a time, and decodes the streaming slots
between two slices. Run anywhere else (no slot streaming), the layers are as they were: one lazy graph.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import mlx.core as mx
import mlx.nn as nn

from mlxchat.engine.devices import release_thread_streams

_here = threading.local()  # .slices: the TowerSlices whose thread this is
_sliced_classes: dict[type, type] = {}


class _Dropped(BaseException):
    """The request left before its tower was read: the tower's thread ends where it stopped (a BaseException, so
    that no `except Exception` in a model's code takes it for a failure of its own)."""


def _module_lists(module: nn.Module, skip: Any) -> Iterator[list[nn.Module]]:
    for child in module.children().values():
        if child is skip:
            continue
        if isinstance(child, nn.Module):  # (checked first: a module is a dict of its parameters and children)
            modules = [child]
        elif isinstance(child, (list, dict)):
            modules = [c for c in (child if isinstance(child, list) else child.values()) if isinstance(c, nn.Module)]
            if isinstance(child, list) and modules:
                yield modules
        else:
            continue
        for c in modules:
            yield from _module_lists(c, skip)


def slice_tower_layers(vlm: Any) -> int:
    """Makes the layers of a vision model's tower (its longest list of modules outside the language model) places
    where a TowerSlices thread may stop, once; returns how many there are."""
    lists = list(_module_lists(vlm, vlm.language_model))
    layers = max(lists, key=len, default=[])
    for layer in layers:
        cls = type(layer)
        if cls in _sliced_classes.values():
            continue
        if cls not in _sliced_classes:
            _sliced_classes[cls] = type(cls.__name__, (cls,), {"__call__": _sliced_call, "__module__": cls.__module__})
        layer.__class__ = _sliced_classes[cls]
    return len(layers)


def _sliced_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    out = super(type(self), self).__call__(*args, **kwargs)
    slices: TowerSlices | None = getattr(_here, "slices", None)
    if slices is not None:
        mx.eval([o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, mx.array)])
        slices.layer_done()
    return out


class TowerSlices:
    """`run` (a tower's reading) on a thread of its own, advanced a slice at a time by the engine's thread."""

    def __init__(self, run: Callable[[], Any]) -> None:
        self._run = run
        self._go = threading.Semaphore(0)
        self._back = threading.Semaphore(0)
        self._deadline = 0.0
        self._thread: threading.Thread | None = None
        self._dropped = False
        self.result: Any = None
        self.error: Exception | None = None
        self.done = False
        self.slices = 0

    def advance(self, seconds: float) -> bool:
        """Runs the tower for about `seconds` (at least one of its layers), waiting for it; whether it is read. Its
        failure is raised here."""
        self._deadline = time.perf_counter() + seconds
        self.slices += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="mlxchat vision tower", daemon=True)
            self._thread.start()
        else:
            self._go.release()
        self._back.acquire()
        if self.error is not None:
            raise self.error
        return self.done

    def drop(self) -> None:
        """The request ended before its tower was read: the paused thread ends."""
        if self._thread is not None and not self.done and self.error is None:
            self._dropped = True
            self._go.release()

    def layer_done(self) -> None:
        """On the tower's thread, after each layer: hands back to the engine once the slice's time is spent."""
        if time.perf_counter() < self._deadline:
            return
        self._back.release()
        self._go.acquire()
        if self._dropped:
            raise _Dropped

    def _main(self) -> None:
        _here.slices = self
        try:
            out = self._run()
            mx.eval([v for v in out.to_dict().values() if v is not None])
            self.result, self.done = out, True
        except _Dropped:
            return
        except Exception as exc:  # (raised on the engine's thread by advance)
            self.error = exc
        finally:
            release_thread_streams()
        self._back.release()

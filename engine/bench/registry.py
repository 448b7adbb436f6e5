"""The bench's engines: each a runner registered by name, and the errors a run can end with."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mlxchat.engine.bench.workloads import RunTrace, Workload

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel

Runner = Callable[["LoadedModel", Workload], RunTrace]
RUNNERS: dict[str, Runner] = {}


class BenchError(Exception):
    """An engine failed a run: the bench stops and says which engine and why, instead of printing figures."""


class BenchRefused(BenchError):
    """The bench's settings cannot run (the command exits 2, as for any refused setting)."""


def runner(name: str) -> Callable[[Runner], Runner]:
    """Registers an engine's runner under `name` (the name `--engines` and the report use)."""

    def register(fn: Runner) -> Runner:
        RUNNERS[name] = fn
        return fn

    return register

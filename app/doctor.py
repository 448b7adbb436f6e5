"""`mlxchat doctor`: says what mlxchat would run with here and what is wrong with it, in plain lines."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from collections.abc import Callable
from typing import TextIO

from app.config import Settings
from app.console_progress import ConsoleProgress
from engine.blas import BlasInfo, blas_in_use, remedy
from engine.memory import check_memory, format_bytes, memory_info
from engine.models import LoadedModel, ModelLoadError, load_model, resolve_model
from engine.slot_plan import SlotPlan, evaluate_slots

LABEL_WIDTH = 14
# Prints one report line: a label column, then the text.
Line = Callable[[str, str], None]


def run_doctor(settings: Settings, requested: BlasInfo, out: TextIO | None = None) -> int:
    """Prints the report to `out` (stdout); returns 1 when it found something that stops mlxchat, else 0."""
    out = out or sys.stdout

    def line(label: str, text: str) -> None:
        print(f"{label:<{LABEL_WIDTH}}{text}", file=out)

    # Imported here, after the CLI loaded the BLAS: engine.devices imports mlx.core.
    from engine.devices import device_kind, device_name

    line("mlxchat", _version("mlxchat"))
    line("platform", f"{platform.platform()} ({platform.machine()})")
    line("python", f"{platform.python_version()} ({sys.executable})")
    line("mlx", f"{_version('mlx')} on {device_kind()} ({device_name()})")
    _blas_lines(line, requested)
    path = settings.config_file
    line("config", f"{path}" + ("" if path and path.exists() else " (not found: defaults apply)"))

    problems = 0
    loaded: LoadedModel | None = None
    try:
        source = resolve_model(settings.model)
        size = f", {format_bytes(source.size_bytes)} on disk" if source.size_bytes else ""
        line("model", f"{source.kind}: {source.path or source.spec}{size}")
        with ConsoleProgress() as progress:
            loaded = load_model(settings.model, settings.weights_dtype, progress=progress)
        trained = f"{loaded.trained_ctx} tokens" if loaded.trained_ctx else "unknown"
        line("  loaded", f"{loaded.dtype}, {format_bytes(loaded.weights_bytes)} of weights, trained context {trained}")
    except ModelLoadError as exc:
        line("model", f"ERROR: {exc}")
        problems += 1

    plan = evaluate_slots(
        **settings.slot_request(),
        trained_ctx=loaded.trained_ctx if loaded else None,
        kv_bytes_per_token=loaded.kv_bytes_per_token if loaded else 0,
    )
    problems += _plan_lines(line, plan, loaded is not None)

    memory = memory_info()
    available = format_bytes(memory.available_bytes) if memory.available_bytes is not None else "unknown"
    total = f" of {format_bytes(memory.total_bytes)}" if memory.total_bytes else ""
    check = check_memory(loaded.weights_bytes, plan.kv_bytes, memory) if loaded else None
    need = f"; weights + KV + working memory need {format_bytes(check.need_bytes)}" if check else ""
    line("memory", f"{available} available{total}{need}")
    if check and check.warning:
        line("  warning", check.warning)
    if check and check.error:
        line("  ERROR", check.error)
        problems += 1
    return 1 if problems else 0


def _blas_lines(line: Line, requested: BlasInfo) -> None:
    """Which BLAS MLX really calls (not just what was asked for), and the fix when it is the slow one."""
    actual = blas_in_use()
    line("blas", f"{actual.kind}" + (f" ({actual.path})" if actual.path else ""))
    if requested.note:
        line("", requested.note)
    if actual.is_reference:
        line("", f"this is the slow reference BLAS; to fix: {remedy()}")


def _plan_lines(line: Line, plan: SlotPlan, with_kv: bool) -> int:
    """The context semantics in effect; returns how many errors the plan has."""
    line("context", plan.summary)
    if with_kv:
        line("  KV cache", f"{format_bytes(plan.kv_bytes)} ({format_bytes(plan.kv_bytes_per_slot)} per slot)")
    for warning in plan.warnings:
        line("  warning", warning)
    for error in plan.errors:
        line("  ERROR", error)
    return len(plan.errors)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


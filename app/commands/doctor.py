"""`mlxchat doctor`: says what mlxchat would run with here and what is wrong with it, in plain lines."""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from typing import TextIO

from mlxchat.app.commands.mcp_doctor import mcp_lines, start_servers
from mlxchat.app.config.settings import Settings, settings_problems
from mlxchat.app.paths import tuning_file
from mlxchat.app.tools.servers import ToolServers
from mlxchat.app.commands.console_progress import load_configured
from mlxchat.app.version import installed_version
from mlxchat.app.exit_codes import EXIT_USAGE
from mlxchat.engine import (
    BlasInfo,
    LoadedModel,
    ModelLoadError,
    SlotPlan,
    blas_in_use,
    cpu_summary,
    check_memory,
    device_kind,
    device_name,
    plan_slots,
    format_bytes,
    load_step,
    memory_info,
    model_speculation,
    remedy,
    resolve_model,
)

LABEL_WIDTH = 14
# Prints one report line: a label column, then the text.
Line = Callable[[str, str], None]


def run_doctor(settings: Settings, requested: BlasInfo, out: TextIO | None = None, tune: bool = False) -> int:
    """Prints the report to `out` (stdout); returns 2 when the settings cannot run with this model or memory,
    1 when something else stops mlxchat (the model does not load, an MCP server fails), else 0.

    `tune`: also time the ways the model can run on this CPU and remember the fastest. The MCP servers start first,
    in the background, and every one is stopped before this returns.
    """
    servers = start_servers(settings)
    try:
        return _report(settings, requested, out or sys.stdout, tune, servers)
    finally:
        if servers is not None:
            servers.close()


def _report(settings: Settings, requested: BlasInfo, out: TextIO, tune: bool, servers: ToolServers | None) -> int:
    def line(label: str, text: str) -> None:
        print(f"{label:<{LABEL_WIDTH}}{text}", file=out)

    line("mlxchat", installed_version())
    line("platform", f"{platform.platform()} ({platform.machine()})")
    line("python", f"{platform.python_version()} ({sys.executable})")
    path = settings.config_file
    config = f"{path}" + ("" if path and path.exists() else " (not found: defaults apply)")
    if settings.engine == "remote":  # the server runs the model: MLX is neither needed nor looked at
        from mlxchat.app.commands.remote_doctor import remote_lines

        line("config", config)
        broken = remote_lines(settings, line)
        return 1 if mcp_lines(settings, servers, line) + broken else 0

    line("mlx", f"{installed_version('mlx')} on {device_kind()} ({device_name()})")
    line("cpu", cpu_summary())
    _blas_lines(line, requested)
    line("kernels", kernel_line())
    line("config", config)

    problems = 0
    settings_refused = False
    loaded: LoadedModel | None = None
    try:
        source = resolve_model(settings.model)
        size = f", {format_bytes(source.size_bytes)} on disk" if source.size_bytes else ""
        line("model", f"{source.kind}: {source.path or source.spec}{size}")
        loaded = load_configured(settings)
        trained = f"{loaded.trained_ctx} tokens" if loaded.trained_ctx else "unknown"
        line("  loaded", f"{loaded.dtype}, {format_bytes(loaded.weights_bytes)} of weights, trained context {trained}")
        line("  batching", loaded.weights.batching_note)
        _tuning_lines(line, loaded, tune)
    except ModelLoadError as exc:
        line("model", f"ERROR: {exc}")
        settings_refused = load_step(exc) != "model"  # (kv_dtype or the family: the settings must change)
        problems += 1

    draft, draft_said = None, ""
    if loaded and settings.draft_model:  # (its K/V is divided among the same slots: the plan counts it)
        draft, plan, draft_said = _draft(settings, loaded)
        problems += 0 if draft else 1
    else:
        plan = loaded.facts.evaluate(settings.slot_request()) if loaded else plan_slots(settings.slot_request(), None, 0)
    memory = memory_info()
    check = check_memory(loaded.weights_bytes + (draft.weights_bytes if draft else 0), plan.kv_bytes, memory) \
        if loaded else None
    refused = [*settings_problems(settings, loaded.trained_ctx if loaded else None), *plan.errors]
    refused += [check.error] if check and check.error else []
    if refused:
        # A plan that could not run is not summarised: only what to change is.
        for reason in refused:
            line("context", f"REFUSED: {reason}")
    else:
        _plan_lines(line, plan, loaded is not None)
        if loaded:
            line("speculation", model_speculation(loaded, plan.per_slot))
            if draft_said:
                line("  draft", draft_said)

    available = format_bytes(memory.available_bytes) if memory.available_bytes is not None else "unknown"
    total = f" of {format_bytes(memory.total_bytes)}" if memory.total_bytes else ""
    need = f"; weights + KV + working memory need {format_bytes(check.need_bytes)}" if check and not refused else ""
    line("memory", f"{available} available{total}{need}")
    if check and check.warning and not refused:
        line("  warning", check.warning)
    problems += mcp_lines(settings, servers, line)
    if refused or settings_refused:
        return EXIT_USAGE
    return 1 if problems else 0


def _draft(settings: Settings, loaded: LoadedModel) -> tuple[LoadedModel | None, SlotPlan, str]:
    """The draft model `draft_model` names, loaded for `loaded` as the start loads it, the plan with its K/V, and what
    it is and how often it agrees with the model; (None, the plan without it, why it cannot draft) where it cannot."""
    from mlxchat.app.commands.console_progress import ConsoleProgress
    from mlxchat.app.session.start import load_options
    from mlxchat.engine import describe_draft

    assert settings.draft_model
    try:
        with ConsoleProgress() as progress:
            return describe_draft(settings.draft_model, loaded, load_options(settings), settings.slot_request(),
                                  progress)
    except ModelLoadError as exc:  # (the draft cannot draft for the model: DraftRefused)
        return None, loaded.facts.evaluate(settings.slot_request()), f"ERROR: {exc}"


def kernel_line() -> str:
    """Which attention path runs: mlxchat's compiled CPU kernel, or MLX's own operations, and why."""
    from mlxchat.engine import kernel_status

    if device_kind() != "cpu":
        return f"MLX's own on the {device_kind()} (the compiled kernels are for the CPU)"
    return kernel_status().detail


def _blas_lines(line: Line, requested: BlasInfo) -> None:
    """Which BLAS MLX really calls (not just what was asked for), and the fix when it is the slow one."""
    actual = blas_in_use()
    line("blas", f"{actual.kind}" + (f" ({actual.path})" if actual.path else ""))
    if requested.note:
        line("", requested.note)
    if actual.is_reference:
        line("", f"this is the slow reference BLAS; to fix: {remedy()}")


def _tuning_lines(line: Line, loaded: LoadedModel, tune: bool) -> None:
    """How the engine will run the model on this CPU: as measured here, or the default until measured."""
    from mlxchat.engine import tunable, tune

    if not tunable(loaded.model):
        if tune:
            line("  tuning", "nothing to tune: only llama models on a CPU have ways to choose from")
        return
    if tune:
        measured = tune(loaded.model, tuning_file(), lambda case: line("  timing", case))
        line("  tuned", f"{measured.describe()}; saved in {tuning_file()}")
        return
    found = loaded.tuning  # (read at the load)
    line("  tuning", found.describe() if found else "not measured here: split matmuls (run `mlxchat doctor --tune`)")


def _plan_lines(line: Line, plan: SlotPlan, with_kv: bool) -> None:
    """The context semantics in effect, for a plan that can run."""
    line("context", plan.summary)
    if with_kv:
        line("  KV cache", plan.kv_summary)
    for warning in plan.warnings:
        line("  warning", warning)

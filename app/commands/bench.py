"""`mlxchat bench`: the engines side by side (or the UI, a return to a parked chat, a long prompt arriving,
a chat resumed after a restart), as a table, JSON and a plot."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlxchat.app.config.settings import Settings
from mlxchat.app.exit_codes import EXIT_FAILURE, EXIT_USAGE
from mlxchat.app.paths import models_cache_dir, tuning_file
from mlxchat.engine.bench import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_SLOTS,
    KV_SCENARIO,
    LONG_SCENARIO,
    RESUME_SCENARIO,
    RETURN_SCENARIO,
    RETURN_SLOTS,
    RETURN_TOKENS,
    SCENARIOS,
    SPECULATIVE_SCENARIO,
)


def run_bench_command(args: argparse.Namespace, settings: Settings) -> int:
    """`mlxchat bench`: loads the model, runs the engines, prints the table (and writes JSON)."""
    if args.profile and (args.ui or args.scenario != "short" or args.plot or args.json):
        print("mlxchat: --profile measures decode steps alone; leave out --ui, --scenario, --plot and --json",
              file=sys.stderr)
        return EXIT_USAGE
    if args.bits and not args.shape:
        print("mlxchat: --bits quantizes a --shape model; name one with --shape", file=sys.stderr)
        return EXIT_USAGE
    if args.ui and (args.shape or args.plot):
        print("mlxchat: --shape and --plot measure the engines; leave them out with --ui", file=sys.stderr)
        return EXIT_USAGE
    if args.sampled and args.scenario in (RETURN_SCENARIO, LONG_SCENARIO, RESUME_SCENARIO, KV_SCENARIO,
                                          SPECULATIVE_SCENARIO):
        print(f"mlxchat: --sampled applies to the engines' decode runs (--scenario {' or '.join(sorted(SCENARIOS))}); "
              f"leave it out with --scenario {args.scenario}", file=sys.stderr)
        return EXIT_USAGE
    if args.ui:
        from mlxchat.app.bench.ui import run_ui_bench

        picked = {"max_tokens": args.max_tokens} if args.sampled else {"temperature": 0.0, "max_tokens": args.max_tokens}
        # The bench's chats go to a database of their own, not into the user's saved chats.
        with tempfile.TemporaryDirectory(prefix="mlxchat-ui-bench-") as scratch:
            result = run_ui_bench(settings.model_copy(update={"sampling": settings.sampling.model_copy(update=picked)}),
                                  max(args.slots), args.repeats, Path(scratch) / "chats.db")
        print(result.table())
        return 0
    from mlxchat.app.commands.console_progress import load_configured
    from mlxchat.engine.bench import (
        BenchError,
        BenchRefused,
        build_shape,
        check_plot_path,
        format_table,
        make_report,
        plot_report,
        PlotError,
        write_json,
    )

    if args.plot:
        try:
            check_plot_path(args.plot)
        except PlotError as exc:
            print(f"mlxchat: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.shape:
        print(f"bench: building a random-weight {args.shape} llama...", file=sys.stderr, flush=True)
        loaded = build_shape(args.shape, args.bits, tuning_file())
    else:
        loaded = load_configured(settings)
    if args.profile:
        return _profile(args, loaded)
    if args.scenario == RETURN_SCENARIO:
        return _return_bench(args, settings, loaded)
    if args.scenario in (LONG_SCENARIO, RESUME_SCENARIO, KV_SCENARIO, SPECULATIVE_SCENARIO):
        return _scenario_bench(args, settings, loaded)
    sampling = _sampling(args, settings)
    try:
        runs = _run(args, settings, loaded, sampling)
    except BenchError as exc:
        print(f"mlxchat bench: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, BenchRefused) else EXIT_FAILURE
    report = make_report(loaded, runs)
    print(format_table(report))
    if args.json:
        write_json(report, args.json)
        print(f"bench: wrote {args.json}", file=sys.stderr)
    if args.plot:
        plot_report(report, args.plot)
        print(f"bench: drew {args.plot}", file=sys.stderr)
    return 0


def _profile(args: argparse.Namespace, loaded: Any) -> int:
    """`mlxchat bench --profile`: one decode step's time by part, at each --slots count."""
    from mlxchat.engine.bench import BenchRefused, format_profile, profile_decode

    try:
        profiles = profile_decode(loaded, args.slots, steps=max(8, args.max_tokens // 2), on_case=lambda n: print(
            f"bench: profiling decode steps at {n} slot(s)...", file=sys.stderr, flush=True))
    except BenchRefused as exc:
        print(f"mlxchat bench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(format_profile(profiles))
    return 0


def _run(args: argparse.Namespace, settings: Settings, loaded: Any, sampling: Any) -> list[Any]:
    from mlxchat.engine.bench import DEFAULT_ENGINES, SCENARIO_ENGINES, run_bench

    return run_bench(
        loaded,
        engines=args.engines or SCENARIO_ENGINES.get(args.scenario, DEFAULT_ENGINES),
        scenario_name=args.scenario,
        slots=args.slots,
        max_tokens=args.max_tokens,
        repeats=args.repeats,
        # Only an explicit --ctx-size fixes the total: by default the bench fits it to the scenario.
        ctx_size=settings.ctx_size if "ctx_size" in vars(args) else None,
        per_slot_min=settings.per_slot_min,
        sampling=sampling,
        on_case=lambda case: print(f"bench: {case}...", file=sys.stderr, flush=True),
    )


def _sampling(args: argparse.Namespace, settings: Settings) -> Any:
    """The engine's sampling for the runs: the chats' temperature, top_p and top_k with --sampled, else greedy."""
    from mlxchat.engine import SamplingParams

    return settings.sampling.params() if args.sampled else SamplingParams()


def _return_bench(args: argparse.Namespace, settings: Settings, loaded: Any) -> int:
    """`mlxchat bench --scenario return`: TTFT of a return to a parked chat vs a full prefill of its history."""
    from mlxchat.engine.bench import format_return_table, make_report, run_return_bench

    slots = RETURN_SLOTS if args.slots == list(DEFAULT_SLOTS) else min(args.slots)
    print(f"bench: {RETURN_SCENARIO}, {slots} slots, {2 * slots} chats...", file=sys.stderr, flush=True)
    tokens = RETURN_TOKENS if args.max_tokens == DEFAULT_MAX_TOKENS else args.max_tokens  # only the first is timed
    records = run_return_bench(loaded, slots=slots, max_tokens=tokens,
                               park_budget_mb=settings.park_budget_mb)
    report = make_report(loaded, [])
    print(format_return_table(f"{report.model} | {report.dtype}", f"{report.device} | BLAS {report.blas}", records))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in records], indent=2) + "\n")
        print(f"bench: wrote {args.json}", file=sys.stderr)
    return 0


def _draft(settings: Settings, loaded: Any) -> tuple[Any, Any] | None:
    """The draft model `draft_model` names, loaded and checked as the app does, as the engine takes it and as loaded
    (for mlx-lm); None where none is set."""
    from mlxchat.app.commands.console_progress import ConsoleProgress
    from mlxchat.app.session.start import load_options
    from mlxchat.engine.bench import load_draft

    if not settings.draft_model:
        return None
    with ConsoleProgress() as progress:
        return load_draft(settings.draft_model, loaded, load_options(settings), progress)


def _scenario_bench(args: argparse.Namespace, settings: Settings, loaded: Any) -> int:
    """`--scenario long` (streaming gaps while a long prompt is read), `resume` (a chat reopened after a
    restart, with and without the disk tier), `kv` (each kv_dtype against float64 and float32) or `speculative`
    (lookup drafts, and `draft_model`'s where set, against none; then mlx-lm's own with that draft model): one run,
    its tables and JSON."""
    from mlxchat.engine.bench import (
        format_kv_table,
        format_long_table,
        format_resume_table,
        format_peer_table,
        format_speculative_table,
        make_report,
        run_kv_bench,
        run_long_bench,
        run_mlx_lm_speculative,
        run_resume_bench,
        run_speculative_bench,
    )

    says = {LONG_SCENARIO: "the long prompt alone, then with the chats streaming",
            RESUME_SCENARIO: "a chat's first turn, a quit, a restart, its next turn",
            KV_SCENARIO: "each kv_dtype: teacher-forced against float64, greedy against float32",
            SPECULATIVE_SCENARIO: "the edit task, plain prompts and 8 edit chats, without drafts and with"
                                  + (f" (lookup's and {settings.draft_model}'s)" if settings.draft_model else "")}
    print(f"bench: {args.scenario}: {says[args.scenario]}...", file=sys.stderr, flush=True)
    report = make_report(loaded, [])
    model, device = f"{report.model} | {report.dtype}", f"{report.device} | BLAS {report.blas}"
    if args.scenario == LONG_SCENARIO:
        records = [run_long_bench(loaded, stall=settings.prefill_stall)]
        print(format_long_table(model, device, records[0]))
    elif args.scenario == KV_SCENARIO:
        records = run_kv_bench(loaded)
        print(format_kv_table(model, device, records))
    elif args.scenario == SPECULATIVE_SCENARIO:
        draft = _draft(settings, loaded)
        records, cost = run_speculative_bench(loaded, draft=draft[0] if draft else None)
        print(format_speculative_table(model, device, records, cost))
        if draft:  # mlx-lm's own drafts with the same model, on the same prompts
            print("bench: speculative: mlx-lm with the same draft model...", file=sys.stderr, flush=True)
            peers = run_mlx_lm_speculative(loaded, draft[1])
            print(format_peer_table(peers))
            records += peers
    else:
        records = run_resume_bench(loaded)
        print(format_resume_table(model, device, records))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in records], indent=2) + "\n")
        print(f"bench: wrote {args.json}", file=sys.stderr)
    return 0

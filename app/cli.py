"""The `mlxchat` command: the chat UI by default; `doctor`, `bench`, `chats` and `export` as subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mlxchat.app.chats.export import FORMATS
from mlxchat.app.config.loading import load_settings
from mlxchat.app.config.settings import ConfigError, Settings
from mlxchat.app.exit_codes import EXIT_FAILURE, EXIT_USAGE
from mlxchat.app.version import installed_version
from mlxchat.engine import KV_SCENARIO, LONG_PROMPT_TOKENS, LONG_SCENARIO, LONG_STREAMS, RESUME_SCENARIO, RETURN_SCENARIO
from mlxchat.engine import (
    DEFAULT_ENGINES,
    SCENARIO_ENGINES,
    SPECULATIVE_SCENARIO,
    DEFAULT_MAX_TOKENS,
    DEFAULT_REPEATS,
    DEFAULT_SLOTS,
    MAX_SLOTS,
    RUNNERS,
)
from mlxchat.engine import BlasError, BlasInfo, load_blas, ModelLoadError, SCENARIOS, SHAPES, use_exact_matmuls

# Flags that set a Settings field of the same name (dest = field name).
SETTING_FLAGS = ("model", "ctx_size", "parallel", "ctx_per_slot")


# What `doctor`'s exit status means (its --help and the README say it).
DOCTOR_EXITS = (f"exit status: 0 when mlxchat can run as set; {EXIT_USAGE} when the settings cannot run with this "
                f"model or memory (or a flag is wrong); {EXIT_FAILURE} when something else stops it: the model does "
                "not load, the server does not answer, or an MCP server fails")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs mlxchat with `argv` (default: the process arguments); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        # argparse has already printed the help, the version or the usage error.
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    given = vars(args)
    try:
        settings = load_settings(given.get("config"), {k: given[k] for k in SETTING_FLAGS if k in given})
        # Before anything imports mlx.core: the BLAS loaded first is the one MLX binds to, and
        # MLX's CUDA backend reads its TF32 switch when it starts.
        late = use_exact_matmuls(settings.exact)
        if late:
            print(f"mlxchat: {late}", file=sys.stderr)
        blas = load_blas(settings.blas)
    except (ConfigError, BlasError) as exc:
        print(f"mlxchat: {exc}", file=sys.stderr)
        return EXIT_USAGE

    try:
        return _run(args, settings, blas)
    except ModelLoadError as exc:
        from mlxchat.engine import load_step

        print(f"mlxchat: {exc}", file=sys.stderr)
        # A family the engine cannot run, or heads kv_dtype cannot store, is refused like a bad setting.
        return EXIT_FAILURE if load_step(exc) == "model" else EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; the settings flags are accepted before and after the subcommand."""
    settings_flags = argparse.ArgumentParser(add_help=False)
    group = settings_flags.add_argument_group("settings (override the config file and MLXCHAT_* variables)")
    # SUPPRESS keeps flags that were not given out of the namespace, so they do not override the
    # config file, and a subcommand's parser does not reset what was given before it.
    group.add_argument("--config", type=Path, metavar="PATH", default=argparse.SUPPRESS,
                       help="config file (default: ~/.config/mlxchat/config.toml; also MLXCHAT_CONFIG)")
    group.add_argument("--model", metavar="SPEC", default=argparse.SUPPRESS,
                       help="MLX model folder, Hugging Face repo id or .gguf file")
    group.add_argument("--ctx-size", type=int, metavar="N", default=argparse.SUPPRESS,
                       help="total context in tokens, shared by all slots")
    group.add_argument("--parallel", type=int, metavar="N", default=argparse.SUPPRESS,
                       help="number of slots (chats generating at once)")
    group.add_argument("--ctx-per-slot", type=int, metavar="N", default=argparse.SUPPRESS,
                       help="context per slot in tokens (alone: total = parallel x this)")

    parser = argparse.ArgumentParser(
        prog="mlxchat",
        description="Several chats at once with one local LLM.",
        parents=[settings_flags],
    )
    parser.add_argument("--version", action="version", version=f"mlxchat {installed_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = commands.add_parser(
        "doctor", parents=[settings_flags], help="show the platform, BLAS, model, context and memory in use",
        epilog=DOCTOR_EXITS,
    )
    doctor.add_argument("--tune", action="store_true",
                        help="on a CPU, time the ways the model can run here and remember the fastest")
    commands.add_parser(
        "models", parents=[settings_flags], help="which model families run here, and how each layer kind is cached"
    )
    bench = commands.add_parser("bench", parents=[settings_flags], help="measure prefill and decode speed")
    bench.add_argument("--engines", type=_names(RUNNERS), metavar="A,B",
                       help=f"engines to measure (known: {', '.join(RUNNERS)}; by default "
                            f"{','.join(DEFAULT_ENGINES)}, and for --scenario reasoning "
                            f"{','.join(SCENARIO_ENGINES['reasoning'])}: what splitting reasoning from answer costs)")
    bench.add_argument("--scenario",
                       choices=[*sorted(SCENARIOS), RETURN_SCENARIO, LONG_SCENARIO, RESUME_SCENARIO, KV_SCENARIO,
                                SPECULATIVE_SCENARIO],
                       default="short",
                       help=f"prompts to play; {RETURN_SCENARIO}: time to first token of a chat coming back to "
                            "its parked KV against a full prefill (the smallest --slots count, twice as many chats); "
                            f"{LONG_SCENARIO}: {LONG_STREAMS} chats stream while a {LONG_PROMPT_TOKENS}-token prompt "
                            f"arrives (their gaps before and during it, its first token against alone); "
                            f"{RESUME_SCENARIO}: a long chat's first token after a restart, with the disk tier "
                            f"and without; {KV_SCENARIO}: each kv_dtype's bytes a token, its agreement with "
                            f"float64 and its greedy replies against float32 K/V; {SPECULATIVE_SCENARIO}: decode "
                            "tok/s with lookup drafts against none (an edit task, plain prompts, 8 edit chats)")
    bench.add_argument("--slots", type=_slot_counts, default=list(DEFAULT_SLOTS), metavar="N,M",
                       help=f"slot counts to measure, e.g. 1,2,4,8 (up to {MAX_SLOTS})")
    bench.add_argument("--shape", choices=list(SHAPES), metavar="NAME",
                       help=f"instead of --model, a random-weight llama of this shape ({', '.join(SHAPES)}), "
                            "built on the fly: no download")
    bench.add_argument("--plot", type=Path, metavar="FILE",
                       help="also draw decode tok/s and time to first token against slots (.png or .svg)")
    bench.add_argument("--max-tokens", type=_count, default=DEFAULT_MAX_TOKENS, metavar="N",
                       help="new tokens per stream (end-of-sequence is suppressed)")
    bench.add_argument("--repeats", type=_count, default=DEFAULT_REPEATS, metavar="N",
                       help="measured runs after one warm-up; medians are reported")
    bench.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    bench.add_argument("--sampled", action="store_true",
                       help="decode with the chats' sampling (temperature, top_p and top_k from the config) "
                            "instead of greedy: what a reply costs with the sampler's work included")
    bench.add_argument("--ui", action="store_true",
                       help="measure the chat UI instead: the largest --slots count of chats streaming in the "
                            "app vs the same requests headless, and key-press latency meanwhile")
    bench.add_argument("--profile", action="store_true",
                       help="where one decode step's time goes here, at each --slots count: each kind of compiled "
                            "kernel, MLX's own operations, Python (MLXCHAT_ISA=avx2 or portable profiles that path)")
    chats = commands.add_parser("chats", parents=[settings_flags], help="list the saved chats and their ids")
    chats.add_argument("--search", default="", metavar="TEXT", help="only chats whose title or text contains TEXT")
    export = commands.add_parser("export", parents=[settings_flags], help="print a saved chat")
    export.add_argument("chat_id", type=int, metavar="CHAT_ID", help="the chat's id (`mlxchat chats` lists them)")
    export.add_argument("--format", choices=FORMATS, default="md", help="Markdown (default) or JSON")
    return parser


def _run(args: argparse.Namespace, settings: Settings, blas: BlasInfo) -> int:
    """Dispatches to the subcommand, or to the chat UI when there is none."""
    if args.command == "doctor":
        from mlxchat.app.commands.doctor import run_doctor

        return run_doctor(settings, blas, tune=args.tune)
    if args.command == "models":
        from mlxchat.app.commands.models import run_models

        return run_models(settings)
    if args.command == "bench":
        from mlxchat.app.commands.bench import run_bench_command

        return run_bench_command(args, settings)
    if args.command in ("chats", "export"):
        from mlxchat.app.commands.chats import run_chats_command

        return run_chats_command(args)
    from mlxchat.app.commands.tui import run_tui

    return run_tui(settings)


def _count(text: str) -> int:
    """A positive integer flag value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: must be at least 1")
    return value


def _counts(text: str) -> list[int]:
    """A comma-separated list of positive integers, e.g. 1,2,4,8."""
    return [_count(part) for part in text.split(",")]


def _slot_counts(text: str) -> list[int]:
    """--slots: a comma-separated list of slot counts, each at most MAX_SLOTS."""
    counts = _counts(text)
    if max(counts) > MAX_SLOTS:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {MAX_SLOTS} slots")
    return counts


def _names(known: Mapping[str, Any]) -> Callable[[str], list[str]]:
    """A parser for a comma-separated list of names, each one of `known`."""

    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(known)}")
        return names

    return parse


if __name__ == "__main__":  # python -m mlxchat.app.cli, as the console script does
    sys.exit(main())

"""The `mlxchat` command: the chat UI by default; `doctor`, `bench`, `chats` and `export` as subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mlxchat.app.chats.export import FORMATS
from mlxchat.app.config.loading import load_settings
from mlxchat.app.config.settings import ConfigError, Settings
from mlxchat.app.exit_codes import EXIT_FAILURE, EXIT_USAGE
from mlxchat.app.version import installed_version
from mlxchat.app.commands.bench_flags import add_bench_parser
from mlxchat.engine import BlasError, BlasInfo, ModelLoadError, prepare_mlx

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
        blas, late = prepare_mlx(settings.blas, settings.exact)
        if late:
            print(f"mlxchat: {late}", file=sys.stderr)
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
    add_bench_parser(commands, settings_flags)
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


if __name__ == "__main__":  # python -m mlxchat.app.cli, as the console script does
    sys.exit(main())

"""The `mlxchat` command: the chat UI by default; `doctor`, `bench`, `chats` and `export` as subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from app.chat_export import FORMATS, export_chat
from app.chat_store import ChatStore, StoreError, local_time
from app.config import ConfigError, Settings, load_settings
from engine.bench import DEFAULT_ENGINES, DEFAULT_MAX_TOKENS, DEFAULT_REPEATS, DEFAULT_SLOTS, RUNNERS, SCENARIOS
from engine.blas import BlasError, BlasInfo, load_blas

# Flags that set a Settings field of the same name (dest = field name).
SETTING_FLAGS = ("model", "ctx_size", "parallel", "ctx_per_slot")
EXIT_USAGE = 2  # bad flags or configuration, as argparse itself exits
EXIT_FAILURE = 1


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
        # Before anything imports mlx.core: the BLAS loaded first is the one MLX binds to.
        blas = load_blas(settings.blas)
    except (ConfigError, BlasError) as exc:
        print(f"mlxchat: {exc}", file=sys.stderr)
        return EXIT_USAGE

    from engine.models import ModelLoadError

    try:
        return _run(args, settings, blas)
    except ModelLoadError as exc:
        print(f"mlxchat: {exc}", file=sys.stderr)
        return EXIT_FAILURE


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
    parser.add_argument("--version", action="version", version=f"mlxchat {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser(
        "doctor", parents=[settings_flags], help="show the platform, BLAS, model, context and memory in use"
    )
    bench = commands.add_parser("bench", parents=[settings_flags], help="measure prefill and decode speed")
    bench.add_argument("--engines", type=_names(RUNNERS), default=list(DEFAULT_ENGINES), metavar="A,B",
                       help=f"engines to measure (known: {', '.join(RUNNERS)})")
    bench.add_argument("--scenario", choices=sorted(SCENARIOS), default="short", help="prompts to play")
    bench.add_argument("--slots", type=_counts, default=list(DEFAULT_SLOTS), metavar="N,M",
                       help="slot counts to measure, e.g. 1,2,4,8")
    bench.add_argument("--max-tokens", type=_count, default=DEFAULT_MAX_TOKENS, metavar="N",
                       help="new tokens per stream (end-of-sequence is suppressed)")
    bench.add_argument("--repeats", type=_count, default=DEFAULT_REPEATS, metavar="N",
                       help="measured runs after one warm-up; medians are reported")
    bench.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    bench.add_argument("--ui", action="store_true",
                       help="measure the chat UI instead: the largest --slots count of chats streaming in the "
                            "app vs the same requests headless, and key-press latency meanwhile")
    chats = commands.add_parser("chats", parents=[settings_flags], help="list the saved chats and their ids")
    chats.add_argument("--search", default="", metavar="TEXT", help="only chats whose title or text contains TEXT")
    export = commands.add_parser("export", parents=[settings_flags], help="print a saved chat")
    export.add_argument("chat_id", type=int, metavar="CHAT_ID", help="the chat's id (`mlxchat chats` lists them)")
    export.add_argument("--format", choices=FORMATS, default="md", help="Markdown (default) or JSON")
    return parser


def _run(args: argparse.Namespace, settings: Settings, blas: BlasInfo) -> int:
    """Dispatches to the subcommand, or to the chat UI when there is none."""
    if args.command == "doctor":
        from app.doctor import run_doctor

        return run_doctor(settings, blas)
    if args.command == "bench":
        return _bench(args, settings)
    if args.command in ("chats", "export"):
        return _saved_chats(args)
    from app.tui import run_tui

    return run_tui(settings)


def _bench(args: argparse.Namespace, settings: Settings) -> int:
    """`mlxchat bench`: loads the model, runs the engines, prints the table (and writes JSON)."""
    if args.ui:
        from app.ui_bench import run_ui_bench

        greedy = settings.sampling.model_copy(update={"temperature": 0.0, "max_tokens": args.max_tokens})
        result = run_ui_bench(settings.model_copy(update={"sampling": greedy}), max(args.slots), args.repeats)
        print(result.table())
        return 0
    from app.console_progress import ConsoleProgress
    from engine.bench import format_table, make_report, run_bench, write_json
    from engine.models import load_model

    with ConsoleProgress() as progress:
        loaded = load_model(settings.model, settings.weights_dtype, progress=progress)
    runs = run_bench(
        loaded,
        engines=args.engines,
        scenario_name=args.scenario,
        slots=args.slots,
        max_tokens=args.max_tokens,
        repeats=args.repeats,
        # Only an explicit --ctx-size fixes the total: by default the bench fits it to the scenario.
        ctx_size=settings.ctx_size if "ctx_size" in vars(args) else None,
        on_case=lambda case: print(f"bench: {case}...", file=sys.stderr, flush=True),
    )
    report = make_report(loaded, runs)
    print(format_table(report))
    if args.json:
        write_json(report, args.json)
        print(f"bench: wrote {args.json}", file=sys.stderr)
    return 0


def _saved_chats(args: argparse.Namespace) -> int:
    """`mlxchat chats` lists the saved chats; `mlxchat export ID` prints one."""
    try:
        store = ChatStore.open_existing()
    except StoreError as exc:
        print(f"mlxchat: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        if args.command == "chats":
            for chat in store.list_chats(args.search):
                state = "open" if chat.open else "    "
                print(f"{chat.id:>5}  {local_time(chat.updated)}  {chat.messages:>4} messages  {state}  {chat.title}")
            return 0
        chat = store.load(args.chat_id)
        if chat is None:
            print(f"mlxchat: there is no chat {args.chat_id} (`mlxchat chats` lists the saved ones)", file=sys.stderr)
            return EXIT_USAGE
        sys.stdout.write(export_chat(chat, args.format))
        return 0
    finally:
        store.close()


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


def _names(known: Mapping[str, Any]) -> Callable[[str], list[str]]:
    """A parser for a comma-separated list of names, each one of `known`."""

    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(known)}")
        return names

    return parse


def _version() -> str:
    try:
        return metadata.version("mlxchat")
    except metadata.PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":  # python -m app.cli, as the console script does
    sys.exit(main())

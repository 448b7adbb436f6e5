"""`mlxchat bench`'s flags, built from the bench's own names (mlxchat.engine.bench), which only the bench imports."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlxchat.engine.bench import (
    DEFAULT_ENGINES,
    DEFAULT_MAX_TOKENS,
    DEFAULT_REPEATS,
    DEFAULT_SLOTS,
    KV_SCENARIO,
    LONG_PROMPT_TOKENS,
    LONG_SCENARIO,
    LONG_STREAMS,
    MAX_SLOTS,
    QUANTIZE_BITS,
    RESUME_SCENARIO,
    RETURN_SCENARIO,
    RUNNERS,
    SCENARIO_ENGINES,
    SCENARIOS,
    SHAPES,
    SPECULATIVE_SCENARIO,
)


def add_bench_parser(commands: Any, settings_flags: argparse.ArgumentParser) -> None:
    """Adds `bench` and its flags to the command line's subcommands."""
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
                            "tok/s with lookup drafts (and draft_model's, beside mlx-lm's own with it, where set) "
                            "against none (an edit task, plain prompts, 8 edit chats)")
    bench.add_argument("--slots", type=_slot_counts, default=list(DEFAULT_SLOTS), metavar="N,M",
                       help=f"slot counts to measure, e.g. 1,2,4,8 (up to {MAX_SLOTS})")
    bench.add_argument("--shape", choices=list(SHAPES), metavar="NAME",
                       help=f"instead of --model, a random-weight llama of this shape ({', '.join(SHAPES)}), "
                            "built on the fly: no download")
    bench.add_argument("--bits", type=int, choices=list(QUANTIZE_BITS), metavar="N",
                       help="with --shape: quantize its weights to N bits (4 or 8, groups of 64), as mlx-community's "
                            "quantized models are")
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
                            "kernel, MLX's own operations, Python, and the step's operations by kind (on a GPU: "
                            "Python and MLX's evaluation; MLXCHAT_ISA=avx2 or portable profiles that path)")


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

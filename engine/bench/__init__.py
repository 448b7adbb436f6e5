"""The bench's public API: what `mlxchat bench` (app/commands/bench.py and the UI bench, app/bench) uses, and nothing
else imports; tests/test_layout.py holds the app to it.

As in mlxchat.engine, every name is imported on first use: the command line builds its parser from these
names before its BLAS is loaded, so `import mlxchat.engine.bench` must not load mlx.core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlxchat.engine.door import lazy_names

# public name -> the module that defines it
_NAMES: dict[str, str] = {
    # what the bench runs of the engine itself: the engine (the UI bench's headless side) and a draft model
    "Engine": "mlxchat.engine.local_engine",
    "load_draft": "mlxchat.engine.speculation.draft_load",
    # kv_scenario
    "format_kv_table": "mlxchat.engine.bench.kv_scenario",
    "KV_SCENARIO": "mlxchat.engine.bench.kv_scenario",
    "run_kv_bench": "mlxchat.engine.bench.kv_scenario",
    # long_scenario
    "format_long_table": "mlxchat.engine.bench.long_scenario",
    "LONG_PROMPT_TOKENS": "mlxchat.engine.bench.long_scenario",
    "LONG_SCENARIO": "mlxchat.engine.bench.long_scenario",
    "LONG_STREAMS": "mlxchat.engine.bench.long_scenario",
    "run_long_bench": "mlxchat.engine.bench.long_scenario",
    # mlx_lm_speculative
    "format_peer_table": "mlxchat.engine.bench.mlx_lm_speculative",
    "run_mlx_lm_speculative": "mlxchat.engine.bench.mlx_lm_speculative",
    # plot
    "check_plot_path": "mlxchat.engine.bench.plot",
    "plot_report": "mlxchat.engine.bench.plot",
    "PlotError": "mlxchat.engine.bench.plot",
    # registry
    "BenchError": "mlxchat.engine.bench.registry",
    "BenchRefused": "mlxchat.engine.bench.registry",
    # report
    "format_table": "mlxchat.engine.bench.report",
    "make_report": "mlxchat.engine.bench.report",
    "write_json": "mlxchat.engine.bench.report",
    # resume_scenario
    "format_resume_table": "mlxchat.engine.bench.resume_scenario",
    "RESUME_SCENARIO": "mlxchat.engine.bench.resume_scenario",
    "run_resume_bench": "mlxchat.engine.bench.resume_scenario",
    # speculative_scenario
    "format_speculative_table": "mlxchat.engine.bench.speculative_scenario",
    "run_speculative_bench": "mlxchat.engine.bench.speculative_scenario",
    "SPECULATIVE_SCENARIO": "mlxchat.engine.bench.speculative_scenario",
    # return_scenario
    "format_return_table": "mlxchat.engine.bench.return_scenario",
    "RETURN_SCENARIO": "mlxchat.engine.bench.return_scenario",
    "RETURN_SLOTS": "mlxchat.engine.bench.return_scenario",
    "RETURN_TOKENS": "mlxchat.engine.bench.return_scenario",
    "run_return_bench": "mlxchat.engine.bench.return_scenario",
    # runners
    "DEFAULT_ENGINES": "mlxchat.engine.bench.runners",
    "SCENARIO_ENGINES": "mlxchat.engine.bench.runners",
    "DEFAULT_MAX_TOKENS": "mlxchat.engine.bench.runners",
    "DEFAULT_REPEATS": "mlxchat.engine.bench.runners",
    "DEFAULT_SLOTS": "mlxchat.engine.bench.runners",
    "MAX_SLOTS": "mlxchat.engine.bench.runners",
    "run_bench": "mlxchat.engine.bench.runners",
    "RUNNERS": "mlxchat.engine.bench.runners",
    # step_profile
    "format_profile": "mlxchat.engine.bench.step_profile",
    "profile_decode": "mlxchat.engine.bench.step_profile",
    # shapes
    "build_shape": "mlxchat.engine.bench.shapes",
    "QUANTIZE_BITS": "mlxchat.engine.bench.shapes",
    "SHAPES": "mlxchat.engine.bench.shapes",
    # workloads
    "SCENARIOS": "mlxchat.engine.bench.workloads",
}

__all__ = sorted(_NAMES)


__getattr__, __dir__ = lazy_names(__name__, _NAMES)


if TYPE_CHECKING:  # what type checkers and editors see
    from mlxchat.engine.local_engine import Engine
    from mlxchat.engine.speculation.draft_load import load_draft
    from mlxchat.engine.bench.kv_scenario import format_kv_table, KV_SCENARIO, run_kv_bench
    from mlxchat.engine.bench.long_scenario import (
        format_long_table,
        LONG_PROMPT_TOKENS,
        LONG_SCENARIO,
        LONG_STREAMS,
        run_long_bench,
    )
    from mlxchat.engine.bench.mlx_lm_speculative import format_peer_table, run_mlx_lm_speculative
    from mlxchat.engine.bench.plot import check_plot_path, plot_report, PlotError
    from mlxchat.engine.bench.registry import BenchError, BenchRefused
    from mlxchat.engine.bench.report import format_table, make_report, write_json
    from mlxchat.engine.bench.resume_scenario import format_resume_table, RESUME_SCENARIO, run_resume_bench
    from mlxchat.engine.bench.return_scenario import (
        format_return_table,
        RETURN_SCENARIO,
        RETURN_SLOTS,
        RETURN_TOKENS,
        run_return_bench,
    )
    from mlxchat.engine.bench.runners import (
        DEFAULT_ENGINES,
        SCENARIO_ENGINES,
        DEFAULT_MAX_TOKENS,
        DEFAULT_REPEATS,
        DEFAULT_SLOTS,
        MAX_SLOTS,
        run_bench,
        RUNNERS,
    )
    from mlxchat.engine.bench.shapes import build_shape, QUANTIZE_BITS, SHAPES
    from mlxchat.engine.bench.step_profile import format_profile, profile_decode
    from mlxchat.engine.bench.workloads import SCENARIOS

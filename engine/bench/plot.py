"""`mlxchat bench --plot FILE`: decode speed and time to first token against slots, one line per engine."""

from __future__ import annotations

from pathlib import Path

from mlxchat.engine.bench.report import BenchReport

INSTALL_PLOT = "pip install 'mlxchat[plot]' (matplotlib)"
FORMATS = (".png", ".svg")


class PlotError(Exception):
    """The plot cannot be drawn; the message says what to do."""


def check_plot_path(path: Path) -> None:
    """Refuses, before any run, a file type the plot cannot be written as, or a missing matplotlib."""
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"--plot {path}: name a .png or .svg file")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError(f"--plot needs matplotlib: {INSTALL_PLOT}") from None


def plot_report(report: BenchReport, path: Path) -> None:
    """Draws the report's decode tok/s and median TTFT against slots for every engine into `path`."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    figure, (decode, ttft) = plt.subplots(1, 2, figsize=(11, 4.5), layout="constrained")
    engines = dict.fromkeys(r.engine for r in report.runs)
    for engine in engines:
        runs = sorted((r for r in report.runs if r.engine == engine), key=lambda r: r.slots)
        slots = [r.slots for r in runs]
        decode.plot(slots, [r.decode_tok_s for r in runs], marker="o", label=engine)
        ttft.plot(slots, [r.ttft_ms_p50 for r in runs], marker="o", label=engine)
    all_slots = sorted({r.slots for r in report.runs})
    for axes, label in ((decode, "aggregate decode tok/s"), (ttft, "median time to first token (ms)")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(all_slots, [str(n) for n in all_slots])
        axes.set_xlabel("slots (streams at once)")
        axes.set_ylabel(label)
        axes.set_ylim(bottom=0)
        axes.grid(True, alpha=0.3)
        axes.legend()
    scenarios = ", ".join(dict.fromkeys(r.scenario for r in report.runs))
    figure.suptitle(f"{report.model} ({report.dtype}), {scenarios} scenario\n{report.machine} · BLAS {report.blas}", fontsize=10)
    figure.savefig(path)
    plt.close(figure)

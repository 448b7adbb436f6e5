"""A bench session's report: what ran where, one record per case; as a table and as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxchat.engine.bench.metrics import MIN_DECODE_S, RunRecord

if TYPE_CHECKING:
    from mlxchat.engine.loading.models import LoadedModel


@dataclass(frozen=True)
class BenchReport:
    """A bench session: what ran where, and one record per (engine, scenario, slots)."""

    model: str
    device: str
    blas: str
    dtype: str
    runs: list[RunRecord]
    machine: str = ""  # the CPU (model, cores, vector extensions) or the GPU's name
    tuning: str = ""  # how the CPU path runs the model here, as measured by `mlxchat doctor --tune`
    reference: str = ""  # what mlx-lm's runners ran, where it is not the loaded model (engine.bench.reference)
    sampling: str = "greedy"  # how the runs picked their tokens (engine.bench.workloads.describe_sampling)

    def to_json(self) -> dict[str, Any]:
        """The report as `mlxchat bench --json` writes it."""
        return asdict(self)


def make_report(loaded: LoadedModel, runs: list[RunRecord]) -> BenchReport:
    """The report of `runs`, saying which model, device, BLAS and dtype they ran on, and how they sampled
    (as each run's engine did; runs that sampled otherwise than each other are named)."""
    from mlxchat.engine.bench import reference
    from mlxchat.engine.forward import tunable
    from mlxchat.engine.cpu.blas import blas_in_use
    from mlxchat.engine.devices import cpu_summary, device_kind, device_name

    kind = device_kind()
    how = ""
    if tunable(loaded.model):
        tuned = loaded.tuning
        how = tuned.describe() if tuned else "split matmuls, not measured here (`mlxchat doctor --tune` measures)"
    return BenchReport(
        model=loaded.source.display_name,
        device=f"{kind} ({device_name()})",
        blas=blas_in_use().kind,
        dtype=loaded.dtype,
        runs=runs,
        machine=cpu_summary() if kind == "cpu" else device_name(),
        tuning=how,
        reference=reference.describe(loaded),
        sampling=" / ".join(dict.fromkeys(r.sampling for r in runs)) or "greedy",
    )


def format_table(report: BenchReport) -> str:
    """The report as an aligned text table, with a header saying what ran where."""
    header = f"model {report.model} | {report.dtype} | device {report.device} | BLAS {report.blas}\n{report.machine}"
    if report.tuning:
        header += f"\nCPU path: {report.tuning}"
    if report.reference and any(r.engine.startswith("mlx-lm") for r in report.runs):
        header += f"\nmlx-lm runs {report.reference}"
    header += f"\nsampling: {report.sampling}"
    columns = ("engine", "scenario", "slots", "decode tok/s", "prefill tok/s", "TTFT ms", "step ms", "KV MiB", "peak MiB")
    rows = [
        (
            r.engine,
            r.scenario,
            str(r.slots),
            "-" if math.isnan(r.decode_tok_s) else f"{r.decode_tok_s:.1f}",
            f"{r.prefill_tok_s:.1f}",
            f"{r.ttft_ms_p50:.0f}",
            f"{r.step_ms_p50:.1f}",
            f"{r.kv_bytes / 2**20:.1f}",
            f"{r.peak_bytes / 2**20:.0f}",
        )
        for r in report.runs
    ]
    lines = aligned(columns, rows, names=2)
    if any(math.isnan(r.decode_tok_s) for r in report.runs):
        lines.append(f"-: the tokens came too close together to time ({MIN_DECODE_S * 1000:g} ms in all): "
                     "no rate to give (raise --max-tokens)")
    return "\n".join([header, *lines])


def aligned(columns: tuple[str, ...], rows: list[tuple[str, ...]], names: int = 1) -> list[str]:
    """A table's lines: its first `names` columns (names) left-aligned, the rest (numbers) right-aligned."""
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(columns)]
    return [
        "  ".join(cell.ljust(w) if i < names else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        for row in [columns, *rows]
    ]


def write_json(report: BenchReport, path: Path) -> None:
    """Writes the report as JSON to `path`."""
    Path(path).write_text(json.dumps(report.to_json(), indent=2) + "\n")

"""The bench harness: metrics from traces, the mlx-lm baseline runner, the table and the JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.bench import (
    RUNNERS,
    RunRecord,
    RunTrace,
    StreamTrace,
    Workload,
    format_table,
    make_report,
    make_workload,
    median_record,
    run_bench,
    summarize,
    write_json,
)
from engine.models import LoadedModel, load_model

RUN_KEYS = {
    "engine",
    "scenario",
    "slots",
    "decode_tok_s",
    "prefill_tok_s",
    "ttft_ms_p50",
    "step_ms_p50",
    "kv_bytes",
    "peak_bytes",
}


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> LoadedModel:
    return load_model(str(tiny_model_dir))


def workload(slots: int) -> Workload:
    return Workload("short", tuple((1,) * 10 for _ in range(slots)), 5)


def test_metrics_of_streams_run_one_after_another() -> None:
    # Two streams of 10 prompt tokens: prefill 1 s, then 4 steps of 0.5 s each, back to back.
    trace = RunTrace(0.0, [StreamTrace(10, 0.0, [1.0, 1.5, 2.0, 2.5, 3.0]), StreamTrace(10, 3.0, [4.0, 4.5, 5.0, 5.5, 6.0])])
    record = summarize("seq", workload(2), trace, peak_bytes=123)
    assert record.prefill_tok_s == pytest.approx(20 / 2.0)
    assert record.decode_tok_s == pytest.approx(8 / 4.0)
    assert record.ttft_ms_p50 == pytest.approx(2500)  # the second stream waits for the first
    assert record.step_ms_p50 == pytest.approx(500)
    assert (record.slots, record.peak_bytes) == (2, 123)


def test_metrics_of_batched_streams_count_overlapping_time_once() -> None:
    trace = RunTrace(0.0, [StreamTrace(10, 0.0, [1.0, 1.5, 2.0]), StreamTrace(10, 0.0, [1.0, 1.5, 2.0])])
    record = summarize("batch", workload(2), trace, peak_bytes=0)
    assert record.prefill_tok_s == pytest.approx(20 / 1.0)
    assert record.decode_tok_s == pytest.approx(4 / 1.0)
    assert record.ttft_ms_p50 == pytest.approx(1000)


def test_median_record_takes_the_median_of_every_measurement() -> None:
    runs = [
        RunRecord("e", "short", 2, d, 10.0 * d, 5.0, 1.0, 100, p) for d, p in ((1.0, 300), (3.0, 100), (2.0, 200))
    ]
    median = median_record(runs)
    assert (median.decode_tok_s, median.prefill_tok_s, median.peak_bytes) == (2.0, 20.0, 200)
    assert isinstance(median.peak_bytes, int) and (median.engine, median.slots) == ("e", 2)


def test_mlx_lm_sequential_decodes_exactly_max_tokens_per_stream(tiny: LoadedModel) -> None:
    work = make_workload(tiny, "short", 2, 12)
    assert work.slots == 2 and work.prompts[0] != work.prompts[1]
    trace = RUNNERS["mlx-lm-sequential"](tiny, work)
    # End-of-sequence is suppressed, so every run decodes the same count.
    assert [len(s.token_times) for s in trace.streams] == [12, 12]
    assert [s.prompt_tokens for s in trace.streams] == [len(p) for p in work.prompts]
    assert trace.kv_bytes > 0


def test_run_bench_report_table_and_json(tiny: LoadedModel, tmp_path: Path) -> None:
    runs = run_bench(tiny, engines=["mlx-lm-sequential"], slots=[1, 2], max_tokens=6, repeats=1)
    assert [(r.engine, r.scenario, r.slots) for r in runs] == [("mlx-lm-sequential", "short", 1), ("mlx-lm-sequential", "short", 2)]
    assert all(r.decode_tok_s > 0 and r.prefill_tok_s > 0 and r.peak_bytes > 0 for r in runs)
    report = make_report(tiny, runs)
    table = format_table(report)
    assert "mlx-lm-sequential" in table and "decode tok/s" in table and report.dtype in table
    write_json(report, tmp_path / "bench.json")
    data = json.loads((tmp_path / "bench.json").read_text())
    assert set(data) == {"model", "device", "blas", "dtype", "runs"}
    assert all(set(run) == RUN_KEYS for run in data["runs"])


def test_bench_command_writes_the_json_schema(tiny_model_dir: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "mlxchat"
    assert script.exists(), "the console script is missing: run `make setup` (pip install -e .)"
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            *(str(script), "bench", "--model", str(tiny_model_dir), "--engines", "mlx-lm-sequential", "--slots", "1"),
            *("--max-tokens", "4", "--repeats", "1", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "mlx-lm-sequential" in done.stdout
    data = json.loads(out.read_text())
    assert data["model"] == tiny_model_dir.name and data["dtype"] == "float32"
    assert [set(run) for run in data["runs"]] == [RUN_KEYS]
    assert data["runs"][0]["slots"] == 1


def test_decode_is_timed_once_every_stream_is_decoding() -> None:
    # Stream 0 decodes alone until stream 1's prompt is in (t=2): only what follows counts.
    trace = RunTrace(0.0, [StreamTrace(10, 0.0, [0.5, 1.0, 1.5, 2.5, 3.0]), StreamTrace(30, 0.0, [2.0, 2.5, 3.0])])
    record = summarize("batched", workload(2), trace, peak_bytes=0)
    assert record.decode_tok_s == pytest.approx(4 / 1.0)


def test_batched_engines_on_the_skewed_scenario(tiny: LoadedModel) -> None:
    runs = run_bench(
        tiny, engines=["mlxchat", "mlx-lm-batch"], scenario_name="skewed", slots=[1, 2], max_tokens=4, repeats=1
    )
    assert [(r.engine, r.slots) for r in runs] == [("mlxchat", 1), ("mlxchat", 2), ("mlx-lm-batch", 1), ("mlx-lm-batch", 2)]
    assert all(r.decode_tok_s > 0 and r.prefill_tok_s > 0 for r in runs)
    long_prompt, short_prompt = make_workload(tiny, "skewed", 2, 4).prompts
    assert len(long_prompt) > 10 * len(short_prompt)


def test_mlxchat_kv_bytes_are_constant_in_slots_for_one_total_context(tiny: LoadedModel) -> None:
    runs = run_bench(tiny, engines=["mlxchat"], slots=[1, 2, 4, 8], max_tokens=2, repeats=1, ctx_size=4096)
    sizes = {r.kv_bytes for r in runs}
    assert len(sizes) == 1 and sizes.pop() == 4096 * tiny.kv_bytes_per_token

"""The bench harness: metrics from traces, the mlx-lm baseline runner, the table and the JSON report."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from mlxchat.engine.bench.metrics import RunRecord, median_record, summarize
from mlxchat.engine.bench.registry import BenchRefused
from mlxchat.engine.bench.report import BenchReport, format_table, make_report, write_json
from mlxchat.engine.bench.runners import RUNNERS, run_bench
from mlxchat.engine.bench.workloads import RunTrace, StreamTrace, Workload, make_workload
from mlxchat.engine.events import SamplingParams
from mlxchat.engine.bench.plot import PlotError, check_plot_path, plot_report
from mlxchat.engine.bench.shapes import SHAPES, build_shape
from mlxchat.engine.loading.models import LoadedModel, ModelLoadError, LoadOptions, load_model
from tests.markers import CONSOLE_SCRIPT, needs_console_script

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
    "sampling",
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
    # An even number of runs: the middle two measurements averaged, the sampling kept as it is.
    assert median_record(runs[:2]).decode_tok_s == 2.0 and median_record(runs[:2]).sampling == "greedy"


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
    # The header says what ran where: the CPU with its cores (or the GPU), and how the CPU path runs.
    assert report.machine and report.machine.splitlines()[0] in table
    if report.device.startswith("cpu"):
        assert f"{os.cpu_count()} cores" in report.machine and "CPU path: split matmuls" in table
    write_json(report, tmp_path / "bench.json")
    data = json.loads((tmp_path / "bench.json").read_text())
    assert set(data) == {"model", "device", "blas", "dtype", "runs", "machine", "tuning", "reference", "sampling"}
    assert "sampling: greedy" in table
    assert all(set(run) == RUN_KEYS for run in data["runs"])
    plot = tmp_path / "bench.png"
    plot_report(report, plot)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    with pytest.raises(PlotError, match="png or .svg"):
        check_plot_path(tmp_path / "bench.pdf")


def test_a_shape_builds_a_random_llama_that_every_engine_runs() -> None:
    assert {name: round(shape.parameters() / 1e6) for name, shape in SHAPES.items()} == {
        "135M": 135, "1B": 1039, "8B": 8030, "narrow": 2,
    }
    loaded = build_shape("135M")
    inner = loaded.model.model
    assert (inner.layers[0].mlp.gate_proj.weight.shape, len(inner.layers)) == ((1536, 576), 30)
    assert loaded.weights_bytes == SHAPES["135M"].parameters() * (4 if loaded.dtype == "float32" else 2)
    runs = run_bench(loaded, engines=["mlxchat", "mlx-lm-batch"], slots=[2], max_tokens=3, repeats=1)
    assert all(r.decode_tok_s > 0 for r in runs)
    # Any id the random model picks decodes; prompts get lengths of real text.
    detokenizer = loaded.tokenizer.detokenizer
    detokenizer.reset()
    for token in (0, SHAPES["135M"].vocab - 1):
        detokenizer.add_token(token)
    detokenizer.finalize()
    assert detokenizer.text == f"t0 t{SHAPES['135M'].vocab - 1}"
    assert 80 < len(make_workload(loaded, "short", 1, 1).prompts[0]) < 200


def test_sampled_runs_draw_with_the_chats_settings_in_every_engine(tiny: LoadedModel) -> None:
    chats = SamplingParams(temperature=0.7, top_p=0.95, top_k=40)
    engines = ["mlxchat", "mlx-lm-batch", "mlx-lm-sequential"]
    # 16 tokens: a sampled reply's bytes can wait for the rest of a character, and 4 tokens all sent at one instant
    # left no decode window to time (NaN, once in a CI run).
    runs = run_bench(tiny, engines=engines, slots=[2], max_tokens=16, repeats=1, sampling=chats)
    assert all(r.decode_tok_s > 0 for r in runs)
    # Each run says how its engine was asked to pick tokens, and the table's header is what the runs did.
    assert {r.engine: r.sampling for r in runs} == {e: "temperature 0.7, top_p 0.95, top_k 40" for e in engines}
    assert "sampling: temperature 0.7, top_p 0.95, top_k 40" in format_table(make_report(tiny, runs))
    greedy = run_bench(tiny, engines=engines, slots=[2], max_tokens=4, repeats=1)
    assert {r.sampling for r in greedy} == {"greedy"} and "sampling: greedy" in format_table(make_report(tiny, greedy))


def test_a_quantized_shape_is_held_as_a_quantized_model_loaded_here_is(capsys: pytest.CaptureFixture) -> None:
    import mlx.nn as nn

    from mlxchat.app.cli import main
    from mlxchat.engine.cpu import kernels

    loaded = build_shape("narrow", 4)
    layer = loaded.model.model.layers[0].mlp.gate_proj
    assert isinstance(layer, nn.QuantizedLinear) and (layer.bits, layer.group_size) == (4, 64)
    assert "4-bit" in loaded.source.display_name and loaded.weights.kernel_matmuls == kernels.active_here()
    assert main(["bench", "--bits", "4", "--slots", "1"]) == 2
    assert "--bits quantizes a --shape model" in capsys.readouterr().err
    if kernels.active_here():  # mlx-lm would multiply MLX's own quantized matmuls: its float32 copy needs a folder
        with pytest.raises(BenchRefused, match="--shape model has none"):
            run_bench(loaded, engines=["mlx-lm-batch"], slots=[1], max_tokens=2, repeats=1)


def test_a_shape_too_big_for_memory_is_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlxchat.engine import memory

    monkeypatch.setattr(memory, "memory_info", lambda: memory.MemoryInfo(total_bytes=8 * 2**30, available_bytes=4 * 2**30))
    with pytest.raises(ModelLoadError, match=r"--shape 8B needs .* of (float32|bfloat16) weights and only 4.0 GiB"):
        build_shape("8B")


@needs_console_script
def test_bench_command_writes_the_json_schema(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            *(str(CONSOLE_SCRIPT), "bench", "--model", str(tiny_model_dir), "--engines", "mlx-lm-sequential", "--slots", "1"),
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


def test_return_bench_times_a_parked_return_against_a_full_prefill(tiny: LoadedModel) -> None:
    from mlxchat.engine.bench.return_scenario import format_return_table, run_return_bench

    parked, full = run_return_bench(tiny, slots=1, chats=2, notes=2, rounds=2, max_tokens=4)
    assert (parked.mode, full.mode) == ("parked", "no parking")
    assert parked.returns == full.returns == 4 and parked.history_tokens == full.history_tokens
    # With the store the chat prefills only its new message; without it, all of its history but the
    # opening it shares with the chat that held the slot (system prompt and template).
    assert parked.cached_p50 > parked.history_tokens - 20 and parked.prefilled_p50 < 20
    assert full.cached_p50 < full.history_tokens // 4 and full.parked_bytes == 0 < parked.parked_bytes
    table = format_return_table("tiny", "cpu", [parked, full])
    assert "history tok" in table.splitlines()[1] and "sooner than a full prefill" in table.splitlines()[-1]


def test_long_bench_reports_the_streams_gaps_and_the_long_prompts_first_token(tiny: LoadedModel) -> None:
    from mlxchat.engine.bench.long_scenario import format_long_table, run_long_bench

    record = run_long_bench(tiny, streams=2, prompt_tokens=600, stall=3.0)
    assert record.prompt_tokens == 600 and record.streams == 2 and record.stall == 3.0
    assert 0 < record.gap_before_p50 <= record.gap_before_max
    assert 0 < record.gap_during_p50 <= record.gap_during_max
    assert record.ttft_alone_ms > 0 and record.ttft_streaming_ms > 0
    table = format_long_table("tiny", "cpu", record)
    assert "streaming gap, during the prefill" in table and "long prompt's first token" in table
    assert table.splitlines()[0].endswith("| prefill_stall 3")


def test_resume_bench_reads_the_history_back_from_disk_after_a_restart(tiny: LoadedModel) -> None:
    from mlxchat.engine.bench.resume_scenario import format_resume_table, run_resume_bench

    disk, none = run_resume_bench(tiny, max_tokens=4)
    assert (disk.mode, none.mode) == ("disk", "no disk") and disk.history_tokens == none.history_tokens
    assert disk.cached_from == "disk" and disk.cached_tokens >= 0.9 * disk.prompt_tokens and disk.disk_bytes > 0
    assert none.cached_tokens == 0 and none.disk_bytes == 0
    assert "read from disk" in format_resume_table("tiny", "cpu", [disk, none]).splitlines()[-1]


def test_a_decode_too_short_to_time_gives_no_figure_rather_than_an_impossible_one() -> None:
    # Every token of a stream in one event (the same instant, give or take): no window to divide by.
    trace = RunTrace(0.0, [StreamTrace(10, 0.0, [1.0, 1.0 + 1e-7, 1.0 + 2e-7]) for _ in range(2)])
    record = summarize("batched", workload(2), trace, peak_bytes=0)
    assert math.isnan(record.decode_tok_s)
    table = format_table(replace(make_report_stub(), runs=[record]))
    assert "  -  " in table and "no rate to give" in table


def test_streams_that_never_all_decode_at_once_are_timed_from_their_first_tokens() -> None:
    # Stream 0 ends before stream 1 has its first token: no steady window, so each stream's own decode counts.
    trace = RunTrace(0.0, [StreamTrace(10, 0.0, [1.0, 1.5, 2.0]), StreamTrace(10, 0.0, [3.0, 3.5, 4.0])])
    record = summarize("batched", workload(2), trace, peak_bytes=0)
    assert record.decode_tok_s == pytest.approx(4 / 2.0)


def make_report_stub() -> BenchReport:
    """A report header for format_table (what ran where is not under test)."""
    return BenchReport(model="m", device="cpu", blas="openblas", dtype="float32", runs=[])


def test_bench_refuses_a_context_too_small_for_its_slots(tiny_model_dir: Path, capsys: pytest.CaptureFixture) -> None:
    from mlxchat.app.cli import main

    args = ["bench", "--model", str(tiny_model_dir), "--engines", "mlxchat", "--repeats", "1", "--max-tokens", "4"]
    assert main([*args, "--ctx-size", "1024", "--slots", "8"]) == 2
    err = capsys.readouterr().err
    assert "1024 / 8 = 128 tokens per slot is below the minimum" in err and "Traceback" not in err


def test_mlx_lm_runs_a_float32_copy_of_a_model_kept_quantized_for_the_kernels(tiny_model_dir: Path, tmp_path: Path):
    """MLX's own quantized matmul does not gain from batching on a CPU: the bench compares with mlx-lm at its
    fastest, and says so; each run's peak leaves out the model the other engine runs."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from mlxchat.app.paths import models_cache_dir
    from mlxchat.engine.bench import reference
    from mlxchat.engine.cpu import kernels, stored
    from tests.tiny_gguf import write_tiny_gguf

    gguf = write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1")
    loaded = load_model(str(gguf), LoadOptions(cache_dir=models_cache_dir()))
    if not stored.holds_stored(loaded.model):
        assert not kernels.status().active or not loaded.dtype.startswith("q")
        pytest.skip("no layer is kept as stored here (no compiled kernels, or not a CPU)")
    copy = reference.model(loaded)
    assert copy is not loaded.model and not stored.holds_stored(copy)
    assert {p.dtype for _, p in tree_flatten(copy.parameters())} == {mx.float32}
    assert reference.idle_bytes(loaded, mlx_lm=True) == loaded.weights_bytes
    assert reference.idle_bytes(loaded, mlx_lm=False) > 4 * loaded.weights_bytes  # float32 against 4 bits
    runs = run_bench(loaded, engines=["mlx-lm-batch", "mlxchat"], slots=[1], max_tokens=4, repeats=1)
    assert "mlx-lm runs a float32 copy" in format_table(make_report(loaded, runs))
    assert all(r.peak_bytes > 0 for r in runs)
    assert reference.idle_bytes(loaded, mlx_lm=True) == 0  # the copy is let go with the bench
    mx.clear_cache()


@needs_console_script
def test_the_reasoning_scenario_measures_mlxchat_with_and_without_its_split(reasoning_model, tmp_path: Path) -> None:
    """`--scenario reasoning` compares the engine with its replies split into reasoning and answer against the
    same engine with the split off, run for run, on a model that reasons."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "bench", "--model", str(reasoning_model("switch")), "--scenario", "reasoning",
         "--slots", "1,2", "--max-tokens", "8", "--repeats", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [(run["engine"], run["slots"]) for run in runs] == [
        ("mlxchat", 1), ("mlxchat", 2), ("mlxchat-unsplit", 1), ("mlxchat-unsplit", 2)]
    assert all(run["decode_tok_s"] > 0 and run["scenario"] == "reasoning" for run in runs)


def test_profile_splits_a_decode_step_into_each_kernel_mlx_and_python(tiny_model_dir: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    from mlxchat.app.cli import main
    from mlxchat.engine.cpu import kernels
    from tests.tiny_gguf import write_tiny_gguf

    gguf = write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1")
    if not kernels.active_here():
        assert main(["bench", "--profile", "--model", str(gguf), "--slots", "1"]) == 2
        assert "--profile counts the compiled kernels' calls" in capsys.readouterr().err
        return
    assert main(["bench", "--profile", "--model", str(gguf), "--slots", "1,3", "--max-tokens", "16"]) == 0
    table = capsys.readouterr().out
    assert f"({kernels.status().module.isa()} kernels" in table
    for part in ("Python: the pass's graph", "kernel: matmul, 4-bit weights", "kernel: attention",
                 "MLX's own operations", "tokens back to Python", "step"):
        assert part in table
    # Counted per call, a step's calls come out whole: one attention and two K/V writes per layer (the tiny model has
    # 2); the RoPE runs inside the q, k and v matmul.
    calls = next(line for line in table.splitlines() if line.startswith("kernel calls a step: "))
    assert "attention: 2 / 2" in calls and "K/V write: 4 / 4" in calls and "rope" not in calls
    assert re.search(r"^operations in a step's graph: \d+ / \d+$", table, re.M)


def test_a_stored_llamas_layers_are_one_operation_of_a_decode_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    # Each operation costs the engine's thread and MLX's stream a few microseconds (engine/cpu/layer_stack.py): the
    # layers (q, k and v with their RoPE, the K and V writes, attention, o, the residual adds and norms, gate and up
    # with the SwiGLU, down) are one; the step's own are the embeddings', the head's and the sampler's.
    from mlxchat.app.paths import models_cache_dir
    from mlxchat.engine.bench.step_profile import profile_decode
    from mlxchat.engine.cpu import kernels
    from tests.tiny_gguf import write_tiny_gguf

    if not kernels.active_here():
        pytest.skip("the compiled kernels do not run here")
    loaded = load_model(str(write_tiny_gguf(tiny_model_dir, tmp_path / "tiny-Q4_1.gguf", "Q4_1")),
                        LoadOptions(cache_dir=models_cache_dir()))
    kinds = profile_decode(loaded, [3], steps=1)[0].operations
    assert kinds["LayerStack"] == 1 and kinds["WeightsMatmul"] == 1  # (the head)
    assert not {"KVWrite", "SlotAttention", "AddRmsNorm", "RmsNorm", "RopeRows"} & set(kinds)


def test_a_graph_is_counted_by_kind_of_operation() -> None:
    import mlx.core as mx

    from mlxchat.engine.bench.step_profile import count_operations

    x = mx.array([1.0, 2.0])
    assert count_operations((x + x) * mx.exp(x) + x) == {"Add": 2, "Multiply": 1, "Exp": 1}

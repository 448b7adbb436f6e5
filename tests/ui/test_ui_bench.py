"""`mlxchat bench --ui` on the tiny model: both kinds of rounds play, keys are timed, the table prints."""

from __future__ import annotations

import os
from pathlib import Path

from mlxchat.app.config.loading import load_settings
from mlxchat.app.bench.gil_waits import Clocks
from mlxchat.app.bench.ui import run_ui_bench


def test_ui_bench_plays_both_rounds_and_times_keys(tiny_model_dir: Path, tmp_path: Path) -> None:
    data_home = os.environ["XDG_DATA_HOME"]
    settings = load_settings(None, {"model": str(tiny_model_dir), "ctx_size": 2048,
                                    "sampling": {"temperature": 0, "max_tokens": 200}})
    result = run_ui_bench(settings, slots=2, repeats=1, db_path=tmp_path / "bench.db")

    assert len(result.headless) == len(result.with_ui) == 1
    # Greedy and the same prompts on cleared slots: both rounds write the same replies.
    assert result.headless[0].tokens == result.with_ui[0].tokens > 0
    assert result.key_latencies_s and all(0 < t < 10 for t in result.key_latencies_s)
    table = result.table()
    assert table.startswith("2 chats, medians of 1 rounds each")
    assert "key press -> text in the input: p50" in table
    assert "first send to last reply done, each round" in table
    if Clocks.read() is not None:  # (Linux)
        assert "the slowest key, " in table and "the UI thread's longest wait for the GIL" in table
        assert result.slowest_key is not None and result.slowest_key.wall == max(result.key_latencies_s)
    # The bench's chats went to the database it was given, not into the user's data directory.
    assert (tmp_path / "bench.db").exists()
    assert not (Path(data_home) / "mlxchat" / "chats.db").exists()

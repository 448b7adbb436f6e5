"""The CPU path's measured choice (split matmuls or plain), kept per machine, and both paths agreeing."""

from __future__ import annotations

import json

import pytest

from tests.markers import needs_cpu

@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from mlx_lm import load

    return load(str(tiny_model_dir))


def _logits(forward, model, rows: int):
    import mlx.core as mx

    from mlxchat.engine.kv import attention
    from mlxchat.engine.kv.slot_store import SlotKVStore

    attention.install(model)
    store = SlotKVStore(rows, 64, len(model.model.layers))
    inputs = mx.array([[3 + i, 5, 7, 11] for i in range(rows)])
    forward.working(True)
    try:
        logits = forward.logits(inputs, store.batch(list(range(rows)), 4), mx.array([3] * rows))
        mx.eval(logits)
    finally:
        forward.working(False)
    return logits


@needs_cpu
def test_split_and_plain_paths_give_the_same_logits(tiny) -> None:
    import mlx.core as mx

    from mlxchat.engine.forward import Forward

    model = tiny[0]
    split, plain = Forward(model, split=True), Forward(model, split=False)
    assert split.tunable and split._cores is not None and plain._cores is None
    assert mx.allclose(_logits(split, model, 3), _logits(plain, model, 3), atol=1e-5).item()


@needs_cpu
def test_tune_measures_saves_and_is_followed(tiny, tmp_path) -> None:
    from mlxchat.engine.cpu.tuning import load_tuning
    from mlxchat.engine.forward import Forward, tune

    model = tiny[0]
    path = tmp_path / "tuning.json"
    assert load_tuning(model, path) is None
    cases: list[str] = []
    measured = tune(model, path, cases.append)
    assert cases == ["split, 1 row", "plain, 1 row", "split, 8 rows", "plain, 8 rows"]
    assert set(measured.step_ms) == {"split", "plain"}
    assert all(ms > 0 for by_rows in measured.step_ms.values() for ms in by_rows.values())
    assert load_tuning(model, path) == measured
    assert "step at 1/8 rows" in measured.describe()

    # What the file says for this machine and model is what the forward is given (the app reads it).
    entries = json.loads(path.read_text())
    for choice in (False, True):
        entries[0]["split"] = choice
        path.write_text(json.dumps(entries))
        tuned = load_tuning(model, path)
        assert tuned is not None and (Forward(model, tuned.split)._cores is not None) is choice
    # Another machine's measurement is not this one's.
    entries[0]["machine"] = "another CPU | 64 cores | mkl"
    path.write_text(json.dumps(entries))
    assert load_tuning(model, path) is None


@needs_cpu
def test_doctor_tune_saves_the_choice_and_the_app_follows_it(tiny_model_dir, capsys) -> None:
    """`mlxchat doctor --tune` measures and saves; the app, started as a user starts it, runs the way saved."""
    from mlxchat.app.cli import main
    from mlxchat.app.paths import tuning_file
    from tests.pilot import make_app, ready, run

    assert main(["doctor", "--tune", "--model", str(tiny_model_dir)]) == 0
    assert "tuned" in capsys.readouterr().out
    entries = json.loads(tuning_file().read_text())
    for choice in (False, True):
        entries[0]["split"] = choice
        tuning_file().write_text(json.dumps(entries))
        seen: list[bool] = []

        async def scenario(app, pilot) -> None:
            await ready(app, pilot)
            seen.append(app.session.engine.core.forward._cores is not None)

        run(make_app(tiny_model_dir), scenario)
        assert seen == [choice]


def test_a_model_with_one_way_to_run_finds_no_tuning(tmp_path) -> None:
    """The lookup the start makes before any forward pass is built: only llama's shape is ever measured, so a model
    of another family (here one without llama's layers) finds nothing, whatever the file holds."""
    from mlxchat.engine.cpu.tuning import load_tuning
    from tests.tiny_families import build_family

    path = tmp_path / "tuning.json"
    entry = {"machine": "any", "model": "any", "split": True, "step_ms": {}, "measured_at": "2026-01-01"}
    path.write_text(json.dumps([entry]))
    assert load_tuning(build_family("mamba2"), path) is None

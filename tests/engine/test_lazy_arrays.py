"""Arrays a model builds lazily outside its parameters are evaluated where they were built, never on the engine's thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.engine.test_families import plan
from tests.tiny_families import save_family
from mlxchat.engine.loading.batch_check import ready_for_slots


def on_a_thread(fn: Any) -> Any:
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.setdefault("value", fn()))
    worker.start()
    worker.join()
    return box["value"]


@pytest.fixture(scope="module")
def llama3_rope_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_family("llama3_rope", tmp_path_factory.mktemp("lazy") / "llama3-rope")


def test_load_model_leaves_no_array_unevaluated(llama3_rope_dir: Path) -> None:
    """Llama 3's `_freqs` is a module item parameters() leaves out: load_model evaluates it on its own thread."""
    import mlx.core as mx

    from mlxchat.engine.loading.lazy import held_arrays
    from mlxchat.engine.loading.models import load_model

    loaded = on_a_thread(lambda: load_model(str(llama3_rope_dir)))
    freqs = [a for a in held_arrays(loaded.model) if a.shape == (8,)]  # head_dim 16: 8 frequencies a layer
    assert freqs
    mx.eval(freqs)  # here, on another thread than the loader's: only possible if they are data already


def test_an_engine_given_another_threads_graph_refuses_it_clearly(llama3_rope_dir: Path, tiny_model_dir: Path) -> None:
    """mlx-lm's loader on a worker thread leaves `_freqs` lazy: an engine started elsewhere says why it cannot run it."""
    from mlx_lm.utils import load_model as mlx_lm_load
    from mlx_lm.utils import load_tokenizer

    from mlxchat.engine.local_engine import Engine

    model, _ = on_a_thread(lambda: mlx_lm_load(llama3_rope_dir))
    with pytest.raises(ValueError, match="computed lazily on another thread"):
        Engine(ready_for_slots(model, load_tokenizer(tiny_model_dir)), plan())

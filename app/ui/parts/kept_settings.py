"""Settings the app changes as it is used, kept for the next start by the one rule of config.loading.keep_settings:
the `theme` (applied at start, an unknown name falling back, saying so; saved when the palette picks one),
`show_timings` (alt+t) and the model a switch keeps (the slots F2 applies are kept by its screen, by that rule)."""

from __future__ import annotations

from typing import Any

from textual.app import App, InvalidThemeError

from mlxchat.app.config.loading import keep_settings
from mlxchat.app.config.settings import ConfigError
from mlxchat.app.paths import default_config_path
from mlxchat.themes import DEFAULT_THEME, THEMES


def apply_theme(app: App[int], name: str) -> None:
    """Gives `app` the theme `name`, or the default with a warning when no theme has that name."""
    try:
        app.theme = name
    except InvalidThemeError:
        app.theme = DEFAULT_THEME
        known = ", ".join(t.name for t in THEMES)
        app.notify(f"Unknown theme {name!r} in the settings: using {DEFAULT_THEME} (ours: {known})", severity="warning")


def save_theme(app: Any, theme: object) -> None:
    """Keeps a theme picked from the palette for the next start."""
    name = getattr(theme, "name", None)
    if name is not None:
        keep_setting(app, "theme", name, f"The theme {name!r}")


def keep_setting(app: Any, key: str, value: Any, what: str) -> None:
    """Keeps `key` = `value` in `app.settings` and the config file (keep_settings); says so where it could not
    (`what`: the setting, in words)."""
    if getattr(app.settings, key) == value:
        return
    try:
        app.settings, _ = keep_settings(app.settings, {key: value})
    except (ConfigError, OSError) as exc:
        path = app.settings.config_file or default_config_path()
        app.notify(f"{what} could not be saved to {path}: {exc}", severity="warning")

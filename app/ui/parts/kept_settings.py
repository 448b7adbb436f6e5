"""Settings the app changes as it is used, kept for the next start: the `theme` (applied at start, an unknown name
falling back, saying so; saved when the palette picks one) and `show_timings` (alt+t)."""

from __future__ import annotations

from typing import Any

from textual.app import App, InvalidThemeError

from mlxchat.app.config.loading import save_settings
from mlxchat.app.config.settings import ConfigError, Settings
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
    """Keeps `key` = `value` for the next start, in the user's config file and in `app.settings` (the app's
    Settings); says so where it could not (`what`: the setting, in words)."""
    settings: Settings = app.settings
    path = settings.config_file
    if path is None or getattr(settings, key) == value:
        return
    try:
        save_settings({key: value}, path)
    except (ConfigError, OSError) as exc:
        app.notify(f"{what} could not be saved to {path}: {exc}", severity="warning")
        return
    app.settings = settings.model_copy(update={key: value})

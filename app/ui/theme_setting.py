"""The `theme` setting: applied at start (an unknown name falls back, saying so), saved when the palette picks one."""

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
    """Keeps a theme picked from the palette for the next start, in the user's config file and in `app.settings`
    (the app's Settings)."""
    settings: Settings = app.settings
    name = getattr(theme, "name", None)
    path = settings.config_file
    if name is None or path is None or name == settings.theme:
        return
    try:
        save_settings({"theme": name}, path)
    except (ConfigError, OSError) as exc:
        app.notify(f"The theme {name!r} could not be saved to {path}: {exc}", severity="warning")
        return
    app.settings = settings.model_copy(update={"theme": name})

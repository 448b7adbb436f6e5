"""mlxchat's own Textual themes, one module per theme; THEMES is what the app registers."""

from __future__ import annotations

from mlxchat.themes.dark import MLXCHAT_DARK
from mlxchat.themes.light import MLXCHAT_LIGHT

THEMES = (MLXCHAT_DARK, MLXCHAT_LIGHT)
DEFAULT_THEME = MLXCHAT_DARK.name

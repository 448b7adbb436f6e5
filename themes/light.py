"""mlxchat-light: a paper-white theme for bright rooms, with the same teal accent as the dark one."""

from __future__ import annotations

from textual.theme import Theme

MLXCHAT_LIGHT = Theme(
    name="mlxchat-light",
    primary="#1f7a74",
    secondary="#4b55c4",
    accent="#b3611b",
    warning="#9a7400",
    error="#c0392b",
    success="#2e8b47",
    foreground="#1e232b",
    background="#f7f6f2",
    surface="#ffffff",
    panel="#e8e6df",
    dark=False,
    variables={
        "footer-key-foreground": "#1f7a74",
        "input-selection-background": "#1f7a74 25%",
    },
)

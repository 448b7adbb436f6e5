"""mlxchat-dark: the default theme, a deep slate background with a teal accent for replies."""

from __future__ import annotations

from textual.theme import Theme

MLXCHAT_DARK = Theme(
    name="mlxchat-dark",
    primary="#3fb8af",
    secondary="#7f8cff",
    accent="#f2a65a",
    warning="#e6c35c",
    error="#ef6f6c",
    success="#7bd88f",
    foreground="#dfe3ea",
    background="#14171c",
    surface="#1b1f26",
    panel="#232934",
    dark=True,
    variables={
        "footer-key-foreground": "#3fb8af",
        "input-selection-background": "#3fb8af 35%",
    },
)

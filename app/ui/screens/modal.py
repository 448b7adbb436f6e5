"""The base of the app's modal screens, whose footers show the keys that work everywhere."""

from __future__ import annotations

from typing import TypeVar

from textual.screen import ModalScreen

from mlxchat.app.ui import keys

ResultT = TypeVar("ResultT")


class AppModalScreen(ModalScreen[ResultT]):
    """A modal screen whose footer also shows F1, F2 and F3 (as the keymap has them): Textual's
    footer shows a modal's own bindings only, though the app's priority bindings still work there."""

    BINDINGS = keys.everywhere_bindings()

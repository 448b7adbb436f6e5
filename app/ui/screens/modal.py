"""The base of the app's modal screens, whose footers show the keys that work everywhere."""

from __future__ import annotations

from typing import TypeVar

from collections.abc import Sequence

from textual import on
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Button, Input, OptionList, Static

from mlxchat.app.ui import keys

ResultT = TypeVar("ResultT")


class AppModalScreen(ModalScreen[ResultT]):
    """A modal screen whose footer also shows F1, F2 and F3 (as the keymap has them): Textual's
    footer shows a modal's own bindings only, though the app's priority bindings still work there."""

    BINDINGS = keys.everywhere_bindings()


class FormScreen(AppModalScreen[ResultT]):
    """A dialog whose fields make one value (`read`): ctrl+s, Enter in a field or its confirming button
    (id `confirm`) gives it, escape or the other button cancels; what is wrong is shown in the line with
    id `form-error` and the dialog stays open."""

    def read(self) -> ResultT:
        """The value the fields give; raises ValueError with every problem, one per line."""
        raise NotImplementedError

    def action_confirm(self) -> None:
        try:
            value = self.read()
        except ValueError as exc:
            self.query_one("#form-error", Static).update(str(exc))
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_confirm()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm":
            self.action_confirm()
        else:
            self.action_cancel()


class PickerScreen(AppModalScreen[ResultT]):
    """A list (its OptionList's rows) to pick one of `values` from, the cursor on the last: Enter picks it,
    escape cancels (None)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, values: Sequence[ResultT]) -> None:
        super().__init__()
        self.values = list(values)

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = len(self.values) - 1
        options.focus()

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.values[event.option_index])

    def action_cancel(self) -> None:
        self.dismiss(None)

"""The line above a chat's input that says its last save failed, while it is retried."""

from __future__ import annotations

from collections.abc import Callable

from textual.timer import Timer
from textual.widgets import Static

from mlxchat.app.chats.conversation import SAVE_RETRY_S


class SaveProblem(Static):
    """Hidden while saving works; after a failure it says why and retries every SAVE_RETRY_S until it works."""

    DEFAULT_CSS = """
    SaveProblem { display: none; padding: 0 1; color: $error; }
    SaveProblem.-shown { display: block; }
    """

    def __init__(self, retry: Callable[[], object]) -> None:
        super().__init__(classes="save-problem", markup=False)
        self._retry = retry
        self._timer: Timer | None = None

    def failed(self, problem: str) -> None:
        self.update(problem)
        self.add_class("-shown")
        if self._timer is None:
            self._timer = self.set_interval(SAVE_RETRY_S, self._retry)

    def worked(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
            self.update("")
            self.remove_class("-shown")

"""The line under the chats while another model loads: what the load does now, with a bar where its length is known
(a download's bytes, a GGUF's conversion)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.widgets import ProgressBar, Static

from mlxchat.app.session.messages import LoadProgress


class SwitchProgress(HorizontalGroup):
    """Loading `name`: the stage and a bar (indeterminate while the length is unknown)."""

    DEFAULT_CSS = """
    SwitchProgress { height: 1; padding: 0 1; background: $boost; }
    SwitchProgress .switch-stage { width: 1fr; color: $text; }
    SwitchProgress ProgressBar { width: 40; }
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self._model = name

    def compose(self) -> ComposeResult:
        yield Static(f"Loading {self._model}: starting", classes="switch-stage", markup=False)
        yield ProgressBar(show_eta=False)

    def on_load_progress(self, event: LoadProgress) -> None:
        progress = event.progress
        self.query_one(".switch-stage", Static).update(f"Loading {self._model}: {progress.stage}")
        bar = self.query_one(ProgressBar)
        bar.update(total=progress.total or None, progress=progress.done)

    @property
    def text(self) -> str:
        return str(self.query_one(".switch-stage", Static).render())

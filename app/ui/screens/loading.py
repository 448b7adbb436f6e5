"""The start-up screen: progress while the model loads or a GGUF converts, then any failure in plain words."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Center, Vertical
from textual.screen import Screen
from textual.widgets import ProgressBar, Static

from mlxchat.app.session.messages import LoadProgress
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.engine import Progress


class LoadingScreen(Screen[None]):
    """Shows what start-up is doing; on failure, the problem and what to change instead of a traceback."""

    CSS_PATH = "loading.tcss"

    def __init__(self, model_label: str) -> None:
        super().__init__()
        self._model_label = model_label

    def compose(self) -> ComposeResult:
        with Vertical(id="loading-box"):
            yield Static(f"mlxchat: loading {self._model_label}", id="loading-title", markup=False)
            yield Static("Starting", id="loading-stage", markup=False)
            with Center():
                yield ProgressBar(id="loading-bar", show_eta=False)
            yield Static("", id="loading-problem", markup=False)
            yield Static("", id="loading-remedy", markup=False)
        yield Footer()

    def on_load_progress(self, event: LoadProgress) -> None:
        self.show_progress(event.progress)

    def show_progress(self, progress: Progress) -> None:
        """Shows a loading step; a step of unknown length shows an indeterminate bar."""
        self.query_one("#loading-stage", Static).update(progress.stage)
        bar = self.query_one("#loading-bar", ProgressBar)
        if progress.total > 0:
            bar.update(total=progress.total, progress=progress.done)
        else:
            bar.update(total=None)

    def show_failure(self, problem: str, remedy: str) -> None:
        """Replaces the progress with what went wrong and what to change."""
        self.add_class("-failed")
        self.query_one("#loading-title", Static).update("mlxchat could not start")
        self.query_one("#loading-stage", Static).display = False
        self.query_one("#loading-bar", ProgressBar).display = False
        self.query_one("#loading-problem", Static).update(problem)
        self.query_one("#loading-remedy", Static).update(f"{remedy}\n\nPress ctrl+q to quit.")

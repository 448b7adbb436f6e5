"""Shows the progress of long work (model load, GGUF conversion) on stderr for the command-line tools."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from mlxchat.app.config.settings import Settings
    from mlxchat.engine import LoadedModel, Progress


class ConsoleProgress:
    """A Progress callback: one line rewritten in place on a terminal, one line per stage otherwise.

    Use it as a context manager so that the terminal line is cleared when the work ends.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._stage: str | None = None
        self._width = 0

    def __call__(self, progress: Progress) -> None:
        if self._tty:
            percent = f" {100 * progress.done / progress.total:3.0f}%" if progress.total else ""
            text = f"{progress.stage}...{percent}"
            # Padding overwrites what was left of a longer previous line.
            self._stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self._stream.flush()
        elif progress.stage != self._stage:
            # Logs and pipes get a line per stage, not a line per percent.
            self._stream.write(f"{progress.stage}...\n")
            self._stream.flush()
        self._stage = progress.stage

    def __enter__(self) -> ConsoleProgress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._tty and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()


def load_configured(settings: Settings) -> LoadedModel:
    """The configured model as the commands load it: weights and K/V types from `settings`, progress on stderr,
    GGUF conversions in the cache folder. Raises ModelLoadError."""
    from mlxchat.app.session.start import load_options
    from mlxchat.engine import load_model

    with ConsoleProgress() as progress:
        return load_model(settings.model, load_options(settings), progress)

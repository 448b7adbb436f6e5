"""The entry point of the chat UI, as `mlxchat` with no subcommand runs it."""

from __future__ import annotations

import sys

from mlxchat.app.config.settings import Settings
from mlxchat.app.exit_codes import EXIT_USAGE
from mlxchat.engine import ModelLoadError, resolve_model

NO_TERMINAL = (
    "the chat UI needs a terminal, and its input or output is not one here: run mlxchat in a terminal "
    "(doctor, models, bench, chats and export need none)"
)


def run_tui(settings: Settings) -> int:
    """Runs the chat app until the user quits; returns the exit status (non-zero when start-up failed).

    Refused before the UI starts, with exit 2: no terminal (Textual would draw into a file and wait for keys
    that never come), and a model that does not exist (its name alone says so; loading one comes later).
    """
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(f"mlxchat: {NO_TERMINAL}", file=sys.stderr)
        return EXIT_USAGE
    if settings.engine == "local" and settings.model:
        try:
            resolve_model(settings.model)
        except ModelLoadError as exc:
            print(f"mlxchat: {exc}", file=sys.stderr)
            return EXIT_USAGE
    from mlxchat.app.ui.app import ChatApp
    from mlxchat.app.ui.pictures import ask_terminal

    ask_terminal(settings.pictures)  # (before Textual reads stdin: the terminal's answers come there)
    app = ChatApp(settings)
    try:
        app.run()
    finally:
        app.session.shutdown()
    return app.return_code or 0

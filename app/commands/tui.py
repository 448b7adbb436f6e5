"""The entry point of the chat UI, as `mlxchat` with no subcommand runs it."""

from __future__ import annotations

from mlxchat.app.config.settings import Settings


def run_tui(settings: Settings) -> int:
    """Runs the chat app until the user quits; returns the exit status (non-zero when start-up failed)."""
    from mlxchat.app.ui.app import ChatApp

    app = ChatApp(settings)
    try:
        app.run()
    finally:
        app.session.shutdown()
    return app.return_code or 0

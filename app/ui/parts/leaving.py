"""The questions asked before something is lost: closing a chat whose message box holds a draft or whose reply is
being written, and quitting while replies are written (unless the setting confirm_quit is off)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from textual.app import App

from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane


def close_losses(pane: ChatPane) -> list[str]:
    """What closing `pane` would lose or stop, in words ([] for nothing)."""
    losses = []
    words = len(pane.chat_input.text.split())
    if words:
        plural = "s" if words != 1 else ""
        losses.append(f"its message box holds an unsent draft of {words} word{plural}, which is lost")
    if pane.busy:
        losses.append("its reply is still being written: it stops, and what it wrote is kept")
    return losses


def ask_before_closing(app: App[int], pane: ChatPane, close: Callable[[ChatPane], Awaitable[None]]) -> None:
    """Closes `pane` at once when nothing is lost, else after a yes."""
    losses = close_losses(pane)
    if not losses:
        app.call_later(close, pane)
        return

    async def answered(yes: bool | None) -> None:
        if yes and pane.is_attached:
            await close(pane)

    app.push_screen(ConfirmScreen(f"Close “{pane.chat_title}”?", "; ".join(losses).capitalize() + ".", "Close"),
                    answered)


def ask_before_quitting(app: App[int], panes: Sequence[ChatPane], ask: bool, quit_now: Callable[[], None]) -> None:
    """Quits at once when no reply is being written (or `ask` is off), else after a yes."""
    writing = [pane.chat_title for pane in panes if pane.busy]
    if not writing or not ask:
        quit_now()
        return
    app.push_screen(ConfirmScreen(
        "Quit mlxchat?",
        f"{len(writing)} repl{'ies are' if len(writing) != 1 else 'y is'} still being written ({', '.join(writing)}): "
        "quitting stops them, and what they wrote is kept. confirm_quit = false in the config quits without asking.",
        "Quit"), lambda yes: quit_now() if yes else None)

"""What the app's owned parts (start-up, saved chats, fan-out) use of the app: its session, store and settings,
its tabs of chats, and the few App methods they call. They are given the app as a ChatHost, so none of them
imports the app, and the app imports each of them."""

from __future__ import annotations

from typing import Any, Callable, Protocol

from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.config.settings import Settings
from mlxchat.app.session.session import Session
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.engine import SamplingParams


class ChatHost(Protocol):
    session: Session
    settings: Settings
    store: ChatStore | None
    sampling: SamplingParams  # what new chats start with

    # Textual's App, as the parts call it.
    notify: Callable[..., None]
    push_screen: Callable[..., Any]
    call_after_refresh: Callable[..., bool]
    call_later: Callable[..., bool]
    post_message: Callable[..., bool]
    run_worker: Callable[..., Any]
    set_interval: Callable[..., Any]
    run_action: Callable[..., Any]
    screen_stack: list[Any]

    @property
    def chat_panes(self) -> list[ChatPane]: ...

    @property
    def active_chat(self) -> ChatPane | None: ...

    async def open_chat(self, chat: Chat, show: bool = True) -> ChatPane | None: ...

    async def close_chat(self, pane: ChatPane) -> None: ...

    async def action_new_chat(self) -> None: ...

    def show_chat(self, pane: ChatPane) -> None: ...

    def show_title(self, pane: ChatPane) -> None: ...

    def show_grid(self, grid: bool) -> None: ...

    def badge(self, pane: ChatPane) -> str: ...

    def record_open_chats(self) -> None: ...

    def action_goto_chat(self, number: int) -> None: ...

"""Saved chats: the chat list (reopen, search, rename), and forks opened as chats of their own."""

from __future__ import annotations

from functools import partial

from mlxchat.app.chats.errors import StoreWriteError
from mlxchat.app.ui.parts.chat_host import ChatHost
from mlxchat.app.ui.screens.chat_list import ChatListScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane


class SavedChats:
    """The app's ways to its saved chats; the app owns one and hands it the list's and the forks' messages."""

    def __init__(self, app: ChatHost) -> None:
        self.app = app

    def _pane_of(self, chat_id: int) -> ChatPane | None:
        """The open pane of saved chat `chat_id`, if it is open."""
        return next((pane for pane in self.app.chat_panes if pane.chat.id == chat_id), None)

    def show_list(self) -> None:
        """Shows the saved chats, to reopen, search, rename or delete them."""
        app = self.app
        if app.store is None:
            app.notify("Chats are not being saved in this session: there is no list to show.", severity="error")
            return
        screen = ChatListScreen(app.store, self._saved_badge)
        app.push_screen(screen, partial(self._open_found, screen))

    async def _open_found(self, screen: ChatListScreen, chat_id: int | None) -> None:
        """Opens the chat picked in the list; picked from a search, the find bar shows the matches in it."""
        await self._open_saved(chat_id)
        pane = self.app.active_chat
        if screen.search and pane is not None and pane.chat.id == chat_id:
            # After the refresh: the chats' screen first gives the keyboard to the chat just shown.
            self.app.call_after_refresh(pane.action_find_in_chat, screen.search)

    async def _open_saved(self, chat_id: int | None) -> None:
        """Shows saved chat `chat_id`: its tab if it is open, else a new tab on a free slot."""
        app = self.app
        if chat_id is None or app.store is None:
            return
        pane = self._pane_of(chat_id)
        if pane is not None:
            app.show_chat(pane)
            return
        chat = app.store.load(chat_id)
        if chat is None:
            app.notify(f"Chat {chat_id} is no longer saved.", severity="warning")
            return
        if await app.open_chat(chat) is not None:
            app.record_open_chats()

    def renamed(self, event: ChatListScreen.Renamed) -> None:
        """A chat renamed in the list: its tab and slot, if it is open, take the new title."""
        pane = self._pane_of(event.chat_id)
        if pane is not None:
            pane.chat.title = event.title
            self.app.show_title(pane)

    def _saved_badge(self, chat_id: int) -> str:
        """The badge of saved chat `chat_id` ("" when it is not open), for the chat list."""
        pane = self._pane_of(chat_id)
        return self.app.badge(pane) if pane is not None else ""

    async def open_fork(self, event: ChatPane.Forked) -> None:
        """Opens a forked chat, saved, with the message it stopped before in its message box."""
        app = self.app
        if app.store is not None:
            try:
                app.store.save(event.chat)
            except StoreWriteError as exc:
                app.notify(str(exc), severity="error")
        pane = await app.open_chat(event.chat)
        if pane is not None:
            pane.chat_input.text = event.draft
            pane.chat_input.move_cursor(pane.chat_input.document.end)
            app.record_open_chats()

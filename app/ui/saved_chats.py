"""Saved chats for ChatApp: the chat list (reopen, search, rename), and forks opened as chats of their own."""

from __future__ import annotations

from functools import partial

from mlxchat.app.chats.errors import StoreWriteError
from mlxchat.app.ui.parts import AppPart
from mlxchat.app.ui.screens.chat_list import ChatListScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane


class SavedChats(AppPart):
    """ChatApp's ways to saved chats (a mixin: ChatApp is what it runs on; handlers by name, not @on:
    Textual collects @on handlers only from a MessagePump's own class)."""

    def _pane_of(self, chat_id: int) -> ChatPane | None:
        """The open pane of saved chat `chat_id`, if it is open."""
        return next((pane for pane in self.chat_panes if pane.chat.id == chat_id), None)

    def action_chat_list(self) -> None:
        """Shows the saved chats, to reopen, search, rename or delete them."""
        if self.store is None:
            self.notify("Chats are not being saved in this session: there is no list to show.", severity="error")
            return
        screen = ChatListScreen(self.store, self._saved_badge)
        self.push_screen(screen, partial(self._open_found, screen))

    async def _open_found(self, screen: ChatListScreen, chat_id: int | None) -> None:
        """Opens the chat picked in the list; picked from a search, the find bar shows the matches in it."""
        await self._open_saved(chat_id)
        pane = self.active_chat
        if screen.search and pane is not None and pane.chat.id == chat_id:
            # After the refresh: the chats' screen first gives the keyboard to the chat just shown.
            self.call_after_refresh(pane.action_find_in_chat, screen.search)

    async def _open_saved(self, chat_id: int | None) -> None:
        """Shows saved chat `chat_id`: its tab if it is open, else a new tab on a free slot."""
        if chat_id is None or self.store is None:
            return
        pane = self._pane_of(chat_id)
        if pane is not None:
            self._show_chat(pane)
            return
        chat = self.store.load(chat_id)
        if chat is None:
            self.notify(f"Chat {chat_id} is no longer saved.", severity="warning")
            return
        if await self.open_chat(chat) is not None:
            self._record_open_chats()

    def on_chat_list_screen_renamed(self, event: ChatListScreen.Renamed) -> None:
        pane = self._pane_of(event.chat_id)
        if pane is not None:
            pane.chat.title = event.title
            self._show_title(pane)

    def _saved_badge(self, chat_id: int) -> str:
        """The badge of saved chat `chat_id` ("" when it is not open), for the chat list."""
        pane = self._pane_of(chat_id)
        return self.badge(pane) if pane is not None else ""

    async def on_chat_pane_forked(self, event: ChatPane.Forked) -> None:
        """Opens a forked chat, saved, with the message it stopped before in its message box."""
        if self.store is not None:
            try:
                self.store.save(event.chat)
            except StoreWriteError as exc:
                self.notify(str(exc), severity="error")
        pane = await self.open_chat(event.chat)
        if pane is not None:
            pane.chat_input.text = event.draft
            pane.chat_input.move_cursor(pane.chat_input.document.end)
            self._record_open_chats()

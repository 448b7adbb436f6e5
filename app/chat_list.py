"""The chat list: every saved chat, searched by text, to reopen, rename or delete."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from app.chat_store import ChatStore, ChatSummary, StoreWriteError, local_time
from app.confirm import ConfirmScreen
from app.dialogs import TextPromptScreen
from app.modal_screen import AppModalScreen


class ChatListScreen(AppModalScreen[int | None]):
    """Saved chats, most recent first; dismisses with the id of the chat to open, or None."""

    DEFAULT_CSS = """
    ChatListScreen { align: center middle; }
    ChatListScreen > Vertical {
        width: 90; height: 80%; max-width: 100%; border: round $primary; background: $surface; padding: 0 1;
    }
    ChatListScreen #chat-list-title { text-style: bold; padding: 0 1; }
    ChatListScreen OptionList { height: 1fr; border: none; }
    ChatListScreen #chat-list-hint { color: $text-muted; padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape", "close", "Close"),
        # The search box keeps the focus: the list's cursor moves from there.
        Binding("down", "move(1)", "Next", show=False),
        Binding("up", "move(-1)", "Previous", show=False),
        Binding("ctrl+t", "rename", "Rename", priority=True),
        Binding("ctrl+d", "delete", "Delete", priority=True),
    ]

    class Renamed(Message):
        """A saved chat got a new title."""

        def __init__(self, chat_id: int, title: str) -> None:
            super().__init__()
            self.chat_id = chat_id
            self.title = title

    def __init__(self, store: ChatStore) -> None:
        super().__init__()
        self._store = store
        self._chats: list[ChatSummary] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Chats", id="chat-list-title")
            yield Input(placeholder="Search titles and messages")
            yield OptionList()
            yield Static("Enter opens · ctrl+t renames · ctrl+d deletes · escape closes", id="chat-list-hint")
        yield Footer()

    def on_mount(self) -> None:
        self._fill()

    @property
    def highlighted(self) -> ChatSummary | None:
        """The chat under the list's cursor."""
        index = self.query_one(OptionList).highlighted
        return self._chats[index] if index is not None and index < len(self._chats) else None

    def _fill(self) -> None:
        """Lists the chats that match the search box, keeping the cursor on the same chat if it still is."""
        kept = self.highlighted
        self._chats = self._store.list_chats(self.query_one(Input).value.strip())
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options([Option(_line(chat)) for chat in self._chats])
        if self._chats:
            ids = [chat.id for chat in self._chats]
            options.highlighted = ids.index(kept.id) if kept is not None and kept.id in ids else 0
        elif self.query_one(Input).value.strip():
            options.add_option(Option("No chat holds that text.", disabled=True))
        else:
            options.add_option(Option("No chats saved yet.", disabled=True))

    @on(Input.Changed)
    def _search(self) -> None:
        self._fill()

    @on(Input.Submitted)
    def _open_highlighted(self) -> None:
        if self.highlighted is not None:
            self.dismiss(self.highlighted.id)

    @on(OptionList.OptionSelected)
    def _open_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_index < len(self._chats):
            self.dismiss(self._chats[event.option_index].id)

    def action_move(self, step: int) -> None:
        options = self.query_one(OptionList)
        if step > 0:
            options.action_cursor_down()
        else:
            options.action_cursor_up()

    def action_close(self) -> None:
        self.dismiss(None)

    def action_rename(self) -> None:
        chat = self.highlighted
        if chat is None:
            return

        def renamed(title: str | None) -> None:
            if title is None:
                return
            try:
                self._store.rename(chat.id, title)
            except StoreWriteError as exc:
                self.notify(str(exc), severity="error")
                return
            self.post_message(self.Renamed(chat.id, title))
            self._fill()

        self.app.push_screen(TextPromptScreen(f"Rename “{chat.title}”", chat.title), renamed)

    def action_delete(self) -> None:
        chat = self.highlighted
        if chat is None:
            return
        if chat.open:
            # Its tab would go on saving it: the chat is closed first, on purpose.
            self.notify(f"“{chat.title}” is open in a tab: close it (ctrl+w) before deleting it.",
                        severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self._store.delete(chat.id)
            except StoreWriteError as exc:
                self.notify(str(exc), severity="error")
                return
            self._fill()

        what = f"“{chat.title}” and its {chat.messages} messages" if chat.messages else f"“{chat.title}”"
        self.app.push_screen(ConfirmScreen(f"Delete {what}?", "This cannot be undone.", "Delete"), confirmed)


def _line(chat: ChatSummary) -> str:
    """A chat as the list shows it: title, size, when it last changed, and whether it is open."""
    line = f"{chat.title or f'Chat {chat.id}'}  ·  {chat.messages} messages  ·  {local_time(chat.updated)}"
    return line + ("  ·  open" if chat.open else "")

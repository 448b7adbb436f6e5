"""The chat list: every saved chat, searched by text, to reopen, rename or delete."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from mlxchat.app.chats.errors import StoreWriteError
from mlxchat.app.chats.chat import local_time
from mlxchat.app.chats.search import ChatSummary
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.dialogs import TextPromptScreen
from mlxchat.app.ui.screens.modal import AppModalScreen
from mlxchat.app.ui.widgets.footer import Footer

BADGE_INTERVAL_S = 0.5  # how often the list looks for changed badges


class ChatListScreen(AppModalScreen[int | None]):
    """Saved chats, most recent first; dismisses with the id of the chat to open, or None."""

    CSS_PATH = "chat_list.tcss"
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

    def __init__(self, store: ChatStore, badge: Callable[[int], str] = lambda chat_id: "") -> None:
        super().__init__()
        self._store = store
        self._badge = badge  # an open chat's badge (● writing, ◷ queued, ✓ finished unseen), as its tab has it
        self._chats: list[ChatSummary] = []
        self.search = ""  # the text searched for (empty: every chat is listed)
        self._badges: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Chats", id="chat-list-title")
            yield Input(placeholder="Search titles and messages")
            yield OptionList()
            yield Static("Enter opens · ctrl+t renames · ctrl+d deletes · escape closes", id="chat-list-hint")
        yield Footer()

    def on_mount(self) -> None:
        self._fill()
        self.set_interval(BADGE_INTERVAL_S, self._refresh_badges)

    def _refresh_badges(self) -> None:
        """Lists the chats again when a badge changed (a reply started, waits or ended)."""
        if [self._badge(chat.id) for chat in self._chats] != self._badges:
            self._fill()

    @property
    def highlighted(self) -> ChatSummary | None:
        """The chat under the list's cursor."""
        index = self.query_one(OptionList).highlighted
        return self._chats[index] if index is not None and index < len(self._chats) else None

    def _fill(self) -> None:
        """Lists the chats that match the search box, keeping the cursor on the same chat if it still is."""
        kept = self.highlighted
        self.search = self.query_one(Input).value.strip()
        self._chats = self._store.list_chats(self.search)
        options = self.query_one(OptionList)
        options.clear_options()
        self._badges = [self._badge(chat.id) for chat in self._chats]
        options.add_options([Option(_line(chat, badge)) for chat, badge in zip(self._chats, self._badges)])
        if self._chats:
            ids = [chat.id for chat in self._chats]
            options.highlighted = ids.index(kept.id) if kept is not None and kept.id in ids else 0
        elif self.search:
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
            where = "a tab: close it (ctrl+w)" if chat.open_here else "another mlxchat: close it there"
            self.notify(f"“{chat.title}” is open in {where} before deleting it.", severity="warning")
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


def _line(chat: ChatSummary, badge: str) -> Text:
    """A chat as the list shows it: its badge, title, size, when it last changed, whether it is open, and
    under a search, where it matched with the text around the match."""
    line = Text(f"{badge} " if badge else "")
    line.append(f"{chat.title or f'Chat {chat.id}'}  ·  {chat.messages} messages  ·  {local_time(chat.updated)}")
    line.append(f"  ·  #{chat.id}", style="dim")  # (chats that begin alike differ by it)
    if chat.open:
        line.append("  ·  open" if chat.open_here else "  ·  open in another mlxchat")
    if chat.found is not None:
        found = chat.found
        line.append(f"\n    {found.where}: ", style="dim")
        line.append(found.excerpt[: found.start], style="dim")
        line.append(found.excerpt[found.start : found.end], style="bold reverse")
        line.append(found.excerpt[found.end :], style="dim")
    return line

"""One chat bound to one engine slot: its conversation, its input box and its slot's status line."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial

from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static, TabPane

from mlxchat.app.chats import conversation as saving
from mlxchat.app.chats.conversation import Conversation, end_note, lost_note, timings_line
from mlxchat.app.chats.errors import StoreWriteError
from mlxchat.app.chats.model import Chat, ChatMessage
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.chats.titles import short_title
from mlxchat.app.session.feed import ReplyFeed
from mlxchat.app.session.messages import ReplyDone
from mlxchat.app.session.session import Session
from mlxchat.app.ui import keys
from mlxchat.app.ui.reply_frames import ReplyFrames
from mlxchat.app.ui.turn_actions import TurnActions
from mlxchat.app.ui.widgets.chat_input import ChatInput
from mlxchat.app.ui.widgets.seat_view import SeatView
from mlxchat.app.ui.widgets.turn_edits import TurnEdits
from mlxchat.app.ui.widgets.reply_view import ReplyView
from mlxchat.engine import Done, RequestStats, SamplingParams

TAB_LABEL_CHARS = 20


class ChatPane(SeatView, TurnEdits, TurnActions, TabPane):
    """A chat: user turns, Markdown replies streamed in batches, the input, and the slot's status line.

    The chat itself, its saving and its turns' lifecycle are its Conversation's (app.chats.conversation):
    the pane shows them and forwards what the user does. The keys that act on one chat are its own
    (scope "pane" in the registry), so they act on the chat that has the keyboard.
    """

    BINDINGS = keys.bindings(pane=True)

    @dataclass
    class Finished(Message):
        """The chat's reply has ended (`reason`, as the engine's Done has it) and is shown (the app says so
        when the chat is out of view)."""

        pane: ChatPane
        reason: str

    @dataclass
    class Forked(Message):
        """The user forked the chat: the app opens `chat` (saved) with `draft` in its message box."""

        chat: Chat
        draft: str

    @dataclass
    class Retitled(Message):
        """The chat got a title (from its first message) or its first id: the tab and the open chats change."""

        pane: ChatPane

    DEFAULT_CSS = """
    ChatPane { layout: vertical; padding: 0; }
    /* A stable gutter: the scrollbar showing up does not re-wrap the turns (a layout and a redraw of each). */
    ChatPane .conversation { height: 1fr; padding: 0 1; scrollbar-gutter: stable; }
    ChatPane .user-turn {
        margin: 1 0 0 8; padding: 0 1; background: $boost; border-left: thick $secondary;
    }
    ChatPane .user-turn.-editing { border-left: thick $warning; }
    ChatPane .assistant-turn { margin: 1 8 0 0; padding: 0 1; border-left: thick $primary; }
    ChatPane .turn-note { margin: 0 8 0 0; padding: 0 1; color: $text-muted; text-style: italic; }
    ChatPane .turn-note.-error { color: $error; text-style: none; }
    ChatPane .turn-note.-refused { color: $warning; text-style: none; }
    ChatPane .turn-timings { display: none; margin: 0 8 0 0; padding: 0 1; color: $text-muted; }
    ChatPane.-timings .turn-timings { display: block; }
    ChatPane .queue-note { margin: 1 8 0 0; padding: 0 1; color: $warning; text-style: italic; }
    ChatPane ChatInput { height: auto; min-height: 3; max-height: 10; border: round $panel-lighten-2; }
    ChatPane ChatInput:focus { border: round $primary; }
    ChatPane .slot-status { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    ChatPane .save-problem { display: none; padding: 0 1; color: $error; }
    ChatPane .save-problem.-shown { display: block; }
    """

    def __init__(
        self,
        number: int,
        chat: Chat,
        session: Session,
        store: ChatStore | None,
        frames: ReplyFrames,
        keymap: Mapping[str, str],
    ) -> None:
        """`keymap`: the user's remapped keys, for the keys the chat's messages name."""
        self.conversation = Conversation(chat, store, self._saved)
        self._number = number
        self.fan_out: int | None = None  # the fan-out this chat is a variant of (its siblings share it)
        self.variant_label = ""  # what this variant's settings differ in ("T=0.2"), shown before its title
        super().__init__(self.chat_title, id=f"chat-{number}")
        self.chat_id = self.id or ""  # the chat's key in the session
        self._session = session
        self._frames = frames
        self._keymap = keymap
        self._retry_timer: Timer | None = None
        self.request_id: int | None = None
        self._turns_mounted = asyncio.Event()  # set once the last turns sent are on the screen
        self.last_stats: RequestStats | None = None  # the counts and speeds of the last reply
        self._sent_text = ""
        self._user_turn: Static | None = None
        self._reply: ReplyView | None = None
        self._feed = ReplyFeed()
        self._status = ""  # what the status line shows
        self._undrawn = False  # whether text came that the reply does not show yet (the chat was hidden)

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="conversation"):
            for message in self.chat.messages:
                yield from self._turn(message)
        yield Static(classes="save-problem", markup=False)
        yield ChatInput(self.conversation.prompts, soft_wrap=True,
                        placeholder="Message · Enter sends · ctrl+j new line")
        yield Static(self._idle_status(), classes="slot-status", markup=False)

    def _turn(self, message: ChatMessage) -> Iterator[Widget]:
        """The widgets of a saved turn: a user box, or a reply with the note on how it ended."""
        if message.role == "user":
            yield Static(message.text, classes="user-turn", markup=False)
        else:
            yield from self._reply_widgets(message.text, message.finish_reason)
            yield from self._timings(message)

    @staticmethod
    def _timings(message: ChatMessage) -> Iterator[Widget]:
        """A reply's timings line, shown while the pane has the -timings class (alt+t)."""
        line = timings_line(message)
        if line is not None:
            yield Static(line, classes="turn-timings", markup=False)

    def _reply_widgets(self, text: str, reason: str | None, error: str | None = None) -> Iterator[Widget]:
        """A finished reply as Markdown (none when nothing was written) and the note on how it ended."""
        if text:
            yield ReplyView(text, classes="assistant-turn")
        yield from self._end_note(text, reason, error)

    def _end_note(self, text: str, reason: str | None, error: str | None) -> Iterator[Widget]:
        """The note under a reply on how it ended, where it says more than that it is done."""
        note = end_note(reason, text, self.chat.sampling.max_tokens, error)
        if note is not None:
            yield Static(note[0], classes=f"turn-note {note[1]}", markup=False)

    @property
    def chat(self) -> Chat:
        return self.conversation.chat

    @property
    def chat_title(self) -> str:
        """The chat's name for its tab and its slot: its title, short, or "Chat N" while it has none."""
        title = short_title(self.chat.title or f"Chat {self._number}", TAB_LABEL_CHARS)
        return f"{self.variant_label} · {title}" if self.variant_label else title

    @property
    def reply_text(self) -> str:
        """The reply streamed so far (empty when none is being written)."""
        return self.conversation.reply_text

    def save(self) -> bool:
        """Writes what of the chat is unsaved; a failure is shown above the input and retried until it works."""
        return self.conversation.save()

    def _saved(self, ok: bool, first: bool) -> None:
        """After each save: a failure shown and retried every SAVE_RETRY_S, a success clears it; a first id retitles."""
        if not ok:
            self._show_save_problem(self.conversation.save_problem or "")
            if self._retry_timer is None:
                self._retry_timer = self.set_interval(saving.SAVE_RETRY_S, self.save)
            return
        if self._retry_timer is not None:
            self._retry_timer.stop()
            self._retry_timer = None
            self._show_save_problem("")
        if first:
            self.post_message(self.Retitled(self))

    def _show_save_problem(self, text: str) -> None:
        for problem in self.query(".save-problem").results(Static):
            problem.update(text)
            problem.set_class(bool(text), "-shown")

    def save_reply(self, reason: str | None = None, stats: RequestStats | None = None) -> None:
        """Saves the reply streamed so far, with why it ended and its counts once it has.

        The app calls this before it quits, with reason "cancelled".
        """
        self.conversation.save_reply(reason, stats)

    def on_mount(self) -> None:
        self.query_one(".conversation", VerticalScroll).anchor()

    @property
    def slot_id(self) -> int | None:
        """The slot the session seated this chat on; None: it has none (fewer slots than chats)."""
        return self._session.slot_of(self.chat_id)

    @property
    def busy(self) -> bool:
        """Whether a reply is being written (or its request is on its way to the engine, or in the queue)."""
        return self.request_id is not None

    @property
    def queued(self) -> bool:
        """Whether the chat's message waits for a slot (every slot is generating)."""
        return self.busy and self._session.place_of(self.chat_id) is not None

    @property
    def chat_input(self) -> ChatInput:
        """The message box."""
        return self.query_one(ChatInput)

    @property
    def status_text(self) -> str:
        """What the slot's status line reads now."""
        return str(self.query_one(".slot-status", Static).render())

    def focus_input(self) -> None:
        """Puts the keyboard in the message box (nothing, once the pane is being closed)."""
        for box in self.query(ChatInput).results(ChatInput):
            # At once, not later as Widget.focus does: keys typed right after ctrl+n, queued while the
            # new chat was mounted, must reach its box, not the previous chat's.
            self.screen.set_focus(box)

    def stop_reply(self) -> bool:
        """Asks the session to stop this chat's reply; False when there is none."""
        return self.busy and self._session.stop(self.chat_id)

    @on(ChatInput.Submitted)
    async def _send(self, event: ChatInput.Submitted) -> None:
        event.stop()
        await self.send(event.text)

    async def send(self, typed: str) -> bool:
        """Sends `typed` as the user's next message (or in place of the one being edited) and asks for
        the reply; False when there is nothing to send or the chat is still answering."""
        text = typed.strip()
        if not text:
            return False
        if not self._can_send():
            return False
        self.chat_input.clear()
        self._sent_text = typed
        if self.conversation.cut_for_edit(self._keep_old_branch):
            await self._show_history()
        titled = bool(self.chat.title)
        self.conversation.add_message(text)
        if not titled and self.chat.id is None:  # (a first save that worked has said so already)
            self.post_message(self.Retitled(self))
        self._user_turn = Static(text, classes="user-turn", markup=False)
        self._start_reply(self._user_turn)
        return True

    def _keep_old_branch(self, old: Chat) -> None:
        """The conversation as it was before the edit stays saved, as a chat of its own in the chat list."""
        assert self.conversation.store is not None
        try:
            self.conversation.store.save(old)
        except StoreWriteError as exc:
            self.notify(f"The conversation before the edit could not be kept: {exc}", severity="error")
            return
        self.notify(f"The conversation before the edit is kept as “{old.title}” in the chat list.")

    def _start_reply(self, *above: Widget) -> None:
        """Asks the engine for a reply to the conversation as it now stands, and has the frames mount
        it, empty, under `above` (one layout for both, in this chat's moment)."""
        self._reply = ReplyView(streaming=True, classes="assistant-turn")
        self._turns_mounted = asyncio.Event()
        self._frames.change(partial(self._mount_turns, [*above, self._reply], self._turns_mounted))
        self._undrawn = False
        self.conversation.begin_reply()
        # A feed per reply: text still coming for a stopped reply goes to its own feed, not this one.
        self._feed = ReplyFeed()
        self.request_id = self._session.submit(self.chat_id, self.chat.prompt(), self.chat.sampling, self._feed)
        self._frames.wake()

    async def _mount_turns(self, turns: list[Widget], mounted: asyncio.Event) -> None:
        try:
            if self.is_attached:
                await self.query_one(".conversation", VerticalScroll).mount_all(turns)
        finally:
            mounted.set()

    def draw_frame(self, repaint: bool) -> None:
        """Takes the text that came since the last frame and, when `repaint` (this chat's turn on the
        screen), shows the reply with it; saves the reply every second."""
        if self._reply is None:  # the reply has ended: its end is being shown
            return
        text = self._feed.take()
        if text:
            self.conversation.reply_parts.append(text)
            self._undrawn = True
        if repaint and self._undrawn:
            self._undrawn = False
            self._reply.show(self.reply_text)
        elif repaint and not self.conversation.reply_parts:
            self._reply.make_room()
        if self.conversation.save_due():
            self.save_reply()

    @on(ReplyDone)
    def _on_done(self, event: ReplyDone) -> None:
        event.stop()
        if event.request == self.request_id and self._reply is not None:
            self._frames.change(partial(self._end_reply, event.request, event.done))

    async def _end_reply(self, request: int, done: Done) -> None:
        """Shows how the reply ended (when the frames give this chat its moment)."""
        if request != self.request_id or self._reply is None or not self.is_attached:
            return
        streamed, self._reply = self._reply, None  # the frames stop drawing and saving this reply
        self.last_stats = done.stats
        following = streamed.following
        await self._clear_queue_note()
        if done.refused:
            await self._refused(done, streamed)
        else:
            await self._finish(done, streamed)
        self._anchor_conversation(following)
        # Last: whoever waits for the chat to be idle finds how the reply ended on the screen.
        self.request_id = None
        if not done.refused:
            self.post_message(self.Finished(self, done.reason))

    def _anchor_conversation(self, following: bool) -> None:
        """Gives the scrolling back to Textual's anchor when a reply has ended (a streaming reply
        scrolls the conversation itself): kept at the end as turns come, unless the user had
        scrolled away from it, who stays where they are."""
        conversation = self.query_one(".conversation", VerticalScroll)
        y = conversation.scroll_y
        conversation.anchor()
        if not following:
            conversation.scroll_to(y=y, animate=False, immediate=True)

    async def _finish(self, done: Done, streamed: ReplyView) -> None:
        """Saves the reply and shows it whole, from the engine's own text, as saved replies are shown."""
        self.conversation.end_reply(done.text, done.reason, done.stats)
        # The streamed widget stays, drawn whole: a new one would cost a widget and a layout more.
        if done.text:
            streamed.finish(done.text)
        widgets = list(self._end_note(done.text, done.reason, done.error))
        if done.stats.lost:
            widgets.append(Static(lost_note(done.stats), classes="turn-note", markup=False))
        if done.text:
            widgets.extend(self._timings(self.chat.messages[-1]))
        if widgets:
            await self.query_one(".conversation").mount_all(widgets, after=streamed)
        if not done.text:
            await streamed.remove()

    async def _refused(self, done: Done, streamed: ReplyView) -> None:
        """Undoes a message the engine would not take: the text goes back to the input with the reason."""
        await self._take_back(streamed)
        await self.query_one(".conversation").mount(
            Static(f"Not sent: {done.error}", classes="turn-note -refused", markup=False)
        )

    async def _take_back(self, streamed: ReplyView) -> None:
        """Undoes the message just sent (its text goes back to the input) and removes its empty reply."""
        if self._user_turn is not None:  # (a regenerated reply has no new message to take back)
            self.conversation.take_back()
            self._put_back(self._sent_text)
        for widget in (self._user_turn, streamed):
            if widget is not None:
                await widget.remove()
        self._user_turn = None

    def _put_back(self, text: str) -> None:
        """Puts `text` in the input, before anything typed there since."""
        typed_since = self.chat_input.text
        self.chat_input.text = text + (f"\n{typed_since}" if typed_since else "")
        self.chat_input.move_cursor(self.chat_input.document.end)

    async def _show_history(self) -> None:
        """Draws the conversation again from the chat (after turns were taken back)."""
        conversation = self.query_one(".conversation", VerticalScroll)
        await conversation.remove_children()
        await conversation.mount_all([widget for message in self.chat.messages for widget in self._turn(message)])

    def turns_may_change(self) -> bool:
        """Whether a turn action may change the conversation now; says why not when it may not."""
        if self.busy:
            self.notify(f"This chat is still answering: {self._key('stop_reply')} stops it first.", severity="warning")
        return not self.busy

    def _can_send(self) -> bool:
        """Whether a request may go to the session now (the chat is idle); says why not when it may not."""
        return self.turns_may_change()

    async def regenerate(self) -> None:
        """Writes the last reply again; the slot still holds the conversation before it, so only the reply is new."""
        if not self._can_send():
            return
        if not self.chat.messages:
            self.notify("There is no reply to write again yet.", severity="warning")
            return
        self.conversation.drop_last_reply()
        self._user_turn = None
        await self._show_history()
        self._start_reply()

    def apply_settings(self, system_prompt: str, sampling: SamplingParams) -> None:
        """Gives the chat a new system prompt and sampling, used from its next turn."""
        self.conversation.apply_settings(system_prompt, sampling)
        self.notify("The chat's settings apply from its next turn.")

    def copy_reply(self) -> None:
        """Copies the last reply to the clipboard."""
        reply = self.conversation.last_reply()
        if reply is None:
            self.notify("There is no reply to copy yet.", severity="warning")
            return
        self.app.copy_to_clipboard(reply.text)
        self.notify(f"Copied the last reply ({len(reply.text)} characters).")

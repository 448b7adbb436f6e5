"""One chat bound to one engine slot: its conversation, its input box and its slot's status line."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from textual import events, on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Markdown, Static, TabPane, TextArea

from app.chat_settings import ChatSettings
from app.chat_store import Chat, ChatMessage, ChatStore, StoreWriteError, now, title_from
from app.engine_bridge import ReplyDone, reply_callback
from app.help_screen import KeyHelp
from app.reply_frames import ReplyFeed, ReplyFrames
from app.streaming_reply import StreamingReply
from app.usage_bar import usage_bar
from engine.events import Done, RequestStats, SlotSnapshot

if TYPE_CHECKING:
    from engine.scheduler import Engine

# The message box handles these keys itself (Enter must not reach the app): the help screen lists them.
INPUT_KEYS = (
    KeyHelp("enter", "Send the message"),
    KeyHelp("ctrl+j / shift+enter", "Start a new line (shift+enter only where the terminal reports it)"),
)
BAR_WIDTH = 12
NO_SLOT_HELP = "it takes the next slot that frees (close a chat with ctrl+w, or add slots with F2)"
SAVE_INTERVAL_S = 1.0  # a streaming reply is saved at most this often: a crash loses at most this much of it
SAVE_RETRY_S = 5.0  # after a failed save (disk full, read-only), how often saving is tried again
TAB_LABEL_CHARS = 20


class ChatInput(TextArea):
    """The message box: Enter sends, ctrl+j (or shift+enter where the terminal reports it) starts a new line."""

    class Submitted(Message):
        """The user pressed Enter on this text."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self.text))
            return
        if event.key in ("ctrl+j", "shift+enter"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)


class ChatPane(TabPane):
    """A chat: user turns, Markdown replies streamed in batches, the input, and the slot's status line.

    The pane's Chat is saved as it changes: each user message before the engine sees it, a reply
    every SAVE_INTERVAL_S while it streams and at its end.
    """

    class Retitled(Message):
        """The chat got a title (from its first message) or its first id: the tab and the open chats change."""

        def __init__(self, pane: ChatPane) -> None:
            super().__init__()
            self.pane = pane

    DEFAULT_CSS = """
    ChatPane { layout: vertical; padding: 0; }
    /* A stable gutter: the scrollbar showing up does not re-wrap the turns (a layout and a redraw of each). */
    ChatPane .conversation { height: 1fr; padding: 0 1; scrollbar-gutter: stable; }
    ChatPane .user-turn {
        margin: 1 0 0 8; padding: 0 1; background: $boost; border-left: thick $secondary;
    }
    ChatPane .user-turn.-editing { border-left: thick $warning; }
    ChatPane .assistant-turn { margin: 1 8 0 0; padding: 0 1; border-left: thick $primary; }
    ChatPane .assistant-turn MarkdownBlock:last-child { margin-bottom: 0; }
    ChatPane .turn-note { margin: 0 8 0 0; padding: 0 1; color: $text-muted; text-style: italic; }
    ChatPane .turn-note.-error { color: $error; text-style: none; }
    ChatPane .turn-note.-refused { color: $warning; text-style: none; }
    ChatPane ChatInput { height: auto; min-height: 3; max-height: 10; border: round $panel-lighten-2; }
    ChatPane ChatInput:focus { border: round $primary; }
    ChatPane .slot-status { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    ChatPane .save-problem { display: none; padding: 0 1; color: $error; }
    ChatPane .save-problem.-shown { display: block; }
    """

    def __init__(
        self, number: int, chat: Chat, slot_id: int | None, engine: Engine, store: ChatStore | None,
        frames: ReplyFrames,
    ) -> None:
        self.chat = chat
        self._number = number
        super().__init__(self.chat_title, id=f"chat-{number}")
        self.chat_id = self.id or ""
        self.slot_id = slot_id  # None: fewer slots were applied than chats are open; it waits for a free one
        self._engine = engine
        self._store = store
        self._frames = frames
        self._retry_timer: Timer | None = None
        self._last_save = 0.0
        self._reply_parts: list[str] = []
        self._reply_message: ChatMessage | None = None
        self._edit_from: int | None = None  # the user message being edited, replaced when the input is sent
        self.request_id: int | None = None
        self.last_stats: RequestStats | None = None  # the counts and speeds of the last reply
        self._sent_text = ""
        self._user_turn: Static | None = None
        self._reply: StreamingReply | None = None
        self._feed = ReplyFeed()
        self._status = ""  # what the status line shows
        self._undrawn = False  # whether text came that the reply does not show yet (the chat was hidden)

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="conversation"):
            for message in self.chat.messages:
                yield from self._turn(message)
        yield Static(classes="save-problem", markup=False)
        yield ChatInput(soft_wrap=True, placeholder="Message · Enter sends · ctrl+j new line")
        yield Static(self._idle_status(), classes="slot-status", markup=False)

    def _turn(self, message: ChatMessage) -> Iterator[Widget]:
        """The widgets of a saved turn: a user box, or a reply with the note on how it ended."""
        if message.role == "user":
            yield Static(message.text, classes="user-turn", markup=False)
        else:
            yield from self._reply_widgets(message.text, message.finish_reason)

    def _reply_widgets(self, text: str, reason: str | None, error: str | None = None) -> Iterator[Widget]:
        """A finished reply as Markdown (none when nothing was written) and the note on how it ended."""
        if text:
            yield Markdown(text, classes="assistant-turn")
        note = self._note(reason, text, error)
        if note is not None:
            yield Static(note[0], classes=f"turn-note {note[1]}", markup=False)

    @property
    def chat_title(self) -> str:
        """The chat's name for its tab and its slot: its title, short, or "Chat N" while it has none."""
        title = self.chat.title or f"Chat {self._number}"
        return title if len(title) <= TAB_LABEL_CHARS else title[: TAB_LABEL_CHARS - 1].rstrip() + "…"

    @property
    def reply_text(self) -> str:
        """The reply streamed so far (empty when none is being written)."""
        return "".join(self._reply_parts)

    def save(self) -> bool:
        """Writes what of the chat is unsaved; a failure is shown above the input and retried until it works."""
        if self._store is None:
            return False
        had_id = self.chat.id is not None
        # Counted from the attempt: a failing disk is tried again every second while a reply streams, not every frame.
        self._last_save = time.monotonic()
        try:
            self._store.save(self.chat)
        except StoreWriteError as exc:
            self._show_save_problem(f"{exc}. The text is kept here and saving is retried every "
                                    f"{SAVE_RETRY_S:g} s.")
            if self._retry_timer is None:
                self._retry_timer = self.set_interval(SAVE_RETRY_S, self.save)
            return False
        if self._retry_timer is not None:
            self._retry_timer.stop()
            self._retry_timer = None
            self._show_save_problem("")
        if not had_id:
            self.post_message(self.Retitled(self))
        return True

    def _show_save_problem(self, text: str) -> None:
        for problem in self.query(".save-problem").results(Static):
            problem.update(text)
            problem.set_class(bool(text), "-shown")

    def save_reply(self, reason: str | None = None, stats: RequestStats | None = None) -> None:
        """Saves the reply streamed so far, with why it ended and its counts once it has.

        The app calls this before it quits, with reason "cancelled".
        """
        if not self._reply_parts:
            return
        if self._reply_message is None:
            self._reply_message = self.chat.add("assistant", "")
        message = self._reply_message
        message.text, message.finish_reason, message.updated, message.saved = self.reply_text, reason, now(), False
        self.chat.touch()
        if stats is not None:
            message.prompt_tokens, message.generated_tokens = stats.prompt_tokens, stats.generated_tokens
        self.save()

    def on_mount(self) -> None:
        self.query_one(".conversation", VerticalScroll).anchor()

    @property
    def busy(self) -> bool:
        """Whether a reply is being written (or its request is on its way to the engine)."""
        return self.request_id is not None

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
            box.focus()

    def stop_reply(self) -> bool:
        """Asks the engine to stop this chat's reply; False when there is none."""
        if not self.busy or self.slot_id is None:
            return False
        self._engine.cancel(self.slot_id)
        return True

    def _idle_status(self) -> str:
        if self.slot_id is None:
            return f"no slot · {NO_SLOT_HELP}"
        return f"slot {self.slot_id} · idle"

    async def move_to_slot(self, slot_id: int | None, kv_kept: bool) -> None:
        """Binds the chat to another slot (or to none) after the slots changed, and says what that means for it."""
        before, self.slot_id = self.slot_id, slot_id
        self._set_status(self._idle_status())
        again = "the conversation is prefilled again on its next turn"
        if slot_id is None:
            note = f"This chat has no slot now; its text is kept: {NO_SLOT_HELP}."
        elif kv_kept:
            note = f"Slot {slot_id} kept this chat's KV cache through the change of slots."
        elif before is None:
            note = f"This chat has slot {slot_id} now; {again}."
        elif before != slot_id:
            note = f"This chat moved from slot {before} to slot {slot_id}; {again}."
        else:
            note = f"Slot {slot_id} was rebuilt without this chat's KV cache; {again}."
        if self.chat.messages:  # an empty chat has no cache to keep or prefill
            await self.query_one(".conversation").mount(Static(note, classes="turn-note", markup=False))

    def show_slot(self, slot: SlotSnapshot) -> None:
        """Shows the slot's state, how full its context is (as a bar) and its speed."""
        bar = usage_bar(slot.used, slot.capacity, BAR_WIDTH)
        text = f"slot {slot.id} · {slot.state} · {slot.used} / {slot.capacity} tokens {bar}"
        if slot.state != "idle":  # a speed is news only while the slot works
            text += f" · {slot.tok_s:.1f} tok/s"
        self._set_status(text)

    def _set_status(self, text: str) -> None:
        if text == self._status:  # (an idle app redraws nothing)
            return
        self._status = text
        # query, not query_one: a pane being closed has already lost its children.
        for status in self.query(".slot-status").results(Static):
            # One line of fixed height: no layout pass, which with many panes streaming costs the
            # UI thread far more than drawing the line (a whole-screen layout per update).
            status.update(text, layout=False)

    @on(ChatInput.Submitted)
    async def _send(self, event: ChatInput.Submitted) -> None:
        event.stop()
        text = event.text.strip()
        if not text:
            return
        if not self._can_send():
            return
        self.chat_input.clear()
        self._sent_text = event.text
        if self._edit_from is not None:
            # The edited message replaces the old one and everything after it.
            del self.chat.messages[self._edit_from :]
            self._edit_from = None
            await self._show_history()
        titled = bool(self.chat.title)
        self.chat.add("user", text)
        # Saved before the engine sees it: a crash from here on never loses what the user wrote.
        self.save()
        if not titled and self.chat.id is None:  # (a first save that worked has said so already)
            self.post_message(self.Retitled(self))
        self._user_turn = Static(text, classes="user-turn", markup=False)
        await self.query_one(".conversation", VerticalScroll).mount(self._user_turn)
        await self._start_reply()

    async def _start_reply(self) -> None:
        """Mounts an empty reply and asks the engine for it, with the conversation as it now stands."""
        self._reply = StreamingReply(classes="assistant-turn")
        await self.query_one(".conversation", VerticalScroll).mount(self._reply)
        self._undrawn = False
        self._reply_parts.clear()
        self._reply_message = None
        # A feed per reply: text still coming for a stopped reply goes to its own feed, not this one.
        self._feed = ReplyFeed()
        handle = self._engine.submit(
            self.slot_id,
            self.chat.prompt(),
            sampling=self.chat.sampling,
            on_event=reply_callback(self, self.chat_id, self._feed),
        )
        self.request_id = handle.request_id
        self._frames.wake()

    def draw_frame(self, shown: bool) -> None:
        """Shows the reply with the text that came since the last frame (later, while the chat is not
        shown); saves the reply every second."""
        if self._reply is None:  # the reply has ended: its end is being shown
            return
        text = self._feed.take()
        if text:
            self._reply_parts.append(text)
            self._undrawn = True
        if shown and self._undrawn:
            self._undrawn = False
            self._reply.show(self.reply_text)
        if time.monotonic() - self._last_save >= SAVE_INTERVAL_S:
            self.save_reply()

    @on(ReplyDone)
    async def _on_done(self, event: ReplyDone) -> None:
        event.stop()
        done = event.done
        if done.request_id != self.request_id or self._reply is None:
            return
        streamed, self._reply = self._reply, None  # the frames stop drawing and saving this reply
        self.last_stats = done.stats
        following = streamed.following
        if done.refused:
            await self._refused(done, streamed)
        else:
            await self._finish(done, streamed)
        self._anchor_conversation(following)
        # Last: whoever waits for the chat to be idle finds how the reply ended on the screen.
        self.request_id = None

    def _anchor_conversation(self, following: bool) -> None:
        """Gives the scrolling back to Textual's anchor when a reply has ended (a streaming reply
        scrolls the conversation itself): kept at the end as turns come, unless the user had
        scrolled away from it, who stays where they are."""
        conversation = self.query_one(".conversation", VerticalScroll)
        y = conversation.scroll_y
        conversation.anchor()
        if not following:
            conversation.scroll_to(y=y, animate=False, immediate=True)

    async def _finish(self, done: Done, streamed: StreamingReply) -> None:
        """Saves the reply and shows it, from the engine's own text, as saved replies are shown."""
        self._reply_parts = [done.text] if done.text else []
        self.save_reply(done.reason, done.stats)
        self._reply_parts.clear()
        self._reply_message = None
        widgets = list(self._reply_widgets(done.text, done.reason, done.error))
        await self.query_one(".conversation").mount_all(widgets, after=streamed)
        await streamed.remove()

    async def _refused(self, done: Done, streamed: StreamingReply) -> None:
        """Undoes a message the engine would not take: the text goes back to the input with the reason."""
        if self._user_turn is not None:  # (a regenerated reply has no new message to take back)
            refused = self.chat.messages.pop()
            if not self.chat.messages and self.chat.title == title_from(refused.text):
                self.chat.title = ""  # the title came from the message taken back
            self.chat.touch()
            self.save()
            self._put_back(self._sent_text)
        for widget in (self._user_turn, streamed):
            if widget is not None:
                await widget.remove()
        self._user_turn = None
        await self.query_one(".conversation").mount(
            Static(f"Not sent: {done.error}", classes="turn-note -refused", markup=False)
        )

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

    def _idle(self) -> bool:
        """Whether a turn action may change the conversation now; says why not when it may not."""
        if self.busy:
            self.notify("This chat is still answering: escape stops it first.", severity="warning")
        return not self.busy

    def _can_send(self) -> bool:
        """Whether a request may go to the engine now (idle, with a slot); says why not when it may not."""
        if not self._idle():
            return False
        if self.slot_id is None:
            self.notify(f"{self.chat_title} has no slot: {NO_SLOT_HELP}.", severity="warning")
            return False
        return True

    async def regenerate(self) -> None:
        """Writes the last reply again; the slot still holds the conversation before it, so only the reply is new."""
        if not self._can_send():
            return
        if not self.chat.messages:
            self.notify("There is no reply to write again yet.", severity="warning")
            return
        if self.chat.messages[-1].role == "assistant":
            self.chat.messages.pop()
            self.chat.touch()
            self.save()
        self._edit_from = None
        self._user_turn = None
        await self._show_history()
        await self._start_reply()

    def edit_last(self) -> None:
        """Puts the last user message in the input: sending it replaces that message and its reply.

        Called again before sending, it cancels the edit.
        """
        if not self._idle():
            return
        turns = list(self.query(".user-turn"))
        if self._edit_from is not None:
            self._edit_from = None
            turns[-1].remove_class("-editing")
            self.notify("Edit cancelled: the conversation stays as it was.")
            return
        index = next((i for i in range(len(self.chat.messages) - 1, -1, -1)
                      if self.chat.messages[i].role == "user"), None)
        if index is None:
            self.notify("There is no message of yours to edit yet.", severity="warning")
            return
        self._edit_from = index
        turns[-1].add_class("-editing")
        self._put_back(self.chat.messages[index].text)
        self.focus_input()
        self.notify("Editing your last message: Enter sends it in place of the old one and its reply "
                    "(ctrl+g again cancels).")

    def apply_settings(self, settings: ChatSettings) -> None:
        """Gives the chat a new system prompt and sampling, used from its next turn."""
        self.chat.system_prompt, self.chat.sampling = settings.system_prompt, settings.sampling
        self.chat.touch()
        self.save()
        self.notify("The chat's settings apply from its next turn.")

    def copy_reply(self) -> None:
        """Copies the last reply to the clipboard."""
        reply = next((m for m in reversed(self.chat.messages) if m.role == "assistant"), None)
        if reply is None:
            self.notify("There is no reply to copy yet.", severity="warning")
            return
        self.app.copy_to_clipboard(reply.text)
        self.notify(f"Copied the last reply ({len(reply.text)} characters).")

    def _note(self, reason: str | None, text: str, error: str | None = None) -> tuple[str, str] | None:
        """The line shown under a finished reply, and its style, or None for a reply that simply ended."""
        if reason is None:
            return "(interrupted: mlxchat stopped before this reply ended)", ""
        if reason == "cancelled":
            return "(stopped)", ""
        if reason == "context":
            return (
                f"(the reply reached the end of slot {self.slot_id}'s context: "
                "start a new chat or use fewer slots for longer conversations)",
                "",
            )
        if reason == "length":
            return f"(the reply reached max_tokens = {self.chat.sampling.max_tokens})", ""
        if reason == "error":
            return f"Error: {error or 'the engine failed (the message was not saved)'}", "-error"
        if not text:
            return "(the model ended its reply without writing anything)", ""
        return None

"""One chat bound to one engine slot: its conversation, its input box and its slot's status line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events, on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Markdown, Static, TabPane, TextArea
from textual.widgets.markdown import MarkdownStream

from app.engine_bridge import ReplyDelta, ReplyDone, reply_callback
from app.help_screen import KeyHelp
from app.usage_bar import usage_bar
from engine.events import Done, RequestStats, SamplingParams, SlotSnapshot

if TYPE_CHECKING:
    from engine.scheduler import Engine

# The message box handles these keys itself (Enter must not reach the app): the help screen lists them.
INPUT_KEYS = (
    KeyHelp("enter", "Send the message"),
    KeyHelp("ctrl+j / shift+enter", "Start a new line (shift+enter only where the terminal reports it)"),
)
RENDER_INTERVAL_S = 1 / 30  # a streaming reply is redrawn at most this often, however fast tokens come
BAR_WIDTH = 12
NO_SLOT_HELP = "it takes the next slot that frees (close a chat with ctrl+w, or add slots with F2)"


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
    """A chat: user turns, Markdown replies streamed in batches, the input, and the slot's status line."""

    DEFAULT_CSS = """
    ChatPane { layout: vertical; padding: 0; }
    ChatPane .conversation { height: 1fr; padding: 0 1; }
    ChatPane .user-turn {
        margin: 1 0 0 8; padding: 0 1; background: $boost; border-left: thick $secondary;
    }
    ChatPane .assistant-turn { margin: 1 8 0 0; padding: 0 1; border-left: thick $primary; }
    ChatPane .assistant-turn MarkdownBlock:last-child { margin-bottom: 0; }
    ChatPane .turn-note { margin: 0 8 0 0; padding: 0 1; color: $text-muted; text-style: italic; }
    ChatPane .turn-note.-error { color: $error; text-style: none; }
    ChatPane .turn-note.-refused { color: $warning; text-style: none; }
    ChatPane ChatInput { height: auto; min-height: 3; max-height: 10; border: round $panel-lighten-2; }
    ChatPane ChatInput:focus { border: round $primary; }
    ChatPane .slot-status { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    """

    def __init__(
        self,
        chat_id: str,
        title: str,
        slot_id: int | None,
        engine: Engine,
        sampling: SamplingParams,
        system_prompt: str,
    ) -> None:
        super().__init__(title, id=chat_id)
        self.chat_id = chat_id
        self.chat_title = title
        self.slot_id = slot_id  # None: fewer slots were applied than chats are open; it waits for a free one
        self._engine = engine
        self._sampling = sampling
        self._system_prompt = system_prompt
        self.messages: list[dict[str, str]] = []
        self.request_id: int | None = None
        self.last_stats: RequestStats | None = None  # the counts and speeds of the last reply
        self._sent_text = ""
        self._user_turn: Static | None = None
        self._reply: Markdown | None = None
        self._stream: MarkdownStream | None = None
        self._pending: list[str] = []
        self._flush_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield VerticalScroll(classes="conversation")
        yield ChatInput(soft_wrap=True, placeholder="Message · Enter sends · ctrl+j new line")
        yield Static(self._idle_status(), classes="slot-status", markup=False)

    def on_mount(self) -> None:
        self.query_one(".conversation", VerticalScroll).anchor()
        self._flush_timer = self.set_interval(RENDER_INTERVAL_S, self._flush, pause=True)

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
        if self.messages:  # an empty chat has no cache to keep or prefill
            await self.query_one(".conversation").mount(Static(note, classes="turn-note", markup=False))

    def show_slot(self, slot: SlotSnapshot) -> None:
        """Shows the slot's state, how full its context is (as a bar) and its speed."""
        bar = usage_bar(slot.used, slot.capacity, BAR_WIDTH)
        text = f"slot {slot.id} · {slot.state} · {slot.used} / {slot.capacity} tokens {bar}"
        if slot.state != "idle":  # a speed is news only while the slot works
            text += f" · {slot.tok_s:.1f} tok/s"
        self._set_status(text)

    def _set_status(self, text: str) -> None:
        # query, not query_one: a pane being closed has already lost its children.
        for status in self.query(".slot-status").results(Static):
            status.update(text)

    @on(ChatInput.Submitted)
    async def _send(self, event: ChatInput.Submitted) -> None:
        event.stop()
        text = event.text.strip()
        if not text:
            return
        if self.busy:
            self.notify("This chat is still answering: escape stops it.", severity="warning")
            return
        if self.slot_id is None:
            self.notify(f"{self.chat_title} has no slot: {NO_SLOT_HELP}.", severity="warning")
            return
        self.chat_input.clear()
        self._sent_text = event.text
        self.messages.append({"role": "user", "content": text})
        conversation = self.query_one(".conversation", VerticalScroll)
        self._user_turn = Static(text, classes="user-turn", markup=False)
        self._reply = Markdown(classes="assistant-turn")
        await conversation.mount_all([self._user_turn, self._reply])
        self._stream = Markdown.get_stream(self._reply)
        self._pending.clear()
        system = [{"role": "system", "content": self._system_prompt}] if self._system_prompt else []
        handle = self._engine.submit(
            self.slot_id,
            system + self.messages,
            sampling=self._sampling,
            on_event=reply_callback(self, self.chat_id),
        )
        self.request_id = handle.request_id
        assert self._flush_timer is not None
        self._flush_timer.resume()

    @on(ReplyDelta)
    def _on_delta(self, event: ReplyDelta) -> None:
        event.stop()
        if event.delta.request_id == self.request_id:
            self._pending.append(event.delta.text)

    async def _flush(self) -> None:
        """Writes the text that came since the last frame to the reply, in one piece."""
        if self._pending and self._stream is not None:
            text = "".join(self._pending)
            self._pending.clear()
            await self._stream.write(text)

    @on(ReplyDone)
    async def _on_done(self, event: ReplyDone) -> None:
        event.stop()
        done = event.done
        if done.request_id != self.request_id:
            return
        self.request_id = None
        self.last_stats = done.stats
        assert self._flush_timer is not None
        self._flush_timer.pause()
        self._pending.clear()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        if done.refused:
            await self._refused(done)
            return
        assert self._reply is not None
        # One full render from the engine's own text: the streamed fragments were only a preview.
        await self._reply.update(done.text)
        if done.text:
            self.messages.append({"role": "assistant", "content": done.text})
        else:
            # Nothing was written: an empty box would only look like a glitch.
            await self._reply.remove()
        note = self._note(done)
        if note is not None:
            text, kind = note
            await self.query_one(".conversation").mount(Static(text, classes=f"turn-note {kind}", markup=False))
        self._reply = None

    async def _refused(self, done: Done) -> None:
        """Undoes a message the engine would not take: the text goes back to the input with the reason."""
        self.messages.pop()
        for widget in (self._user_turn, self._reply):
            if widget is not None:
                await widget.remove()
        self._user_turn = self._reply = None
        typed_since = self.chat_input.text
        self.chat_input.text = self._sent_text + (f"\n{typed_since}" if typed_since else "")
        self.chat_input.move_cursor(self.chat_input.document.end)
        await self.query_one(".conversation").mount(
            Static(f"Not sent: {done.error}", classes="turn-note -refused", markup=False)
        )

    def _note(self, done: Done) -> tuple[str, str] | None:
        """The line shown under a finished reply, and its style, or None for a reply that simply ended."""
        if done.reason == "cancelled":
            return "(stopped)", ""
        if done.reason == "context":
            return (
                f"(the reply reached the end of slot {self.slot_id}'s context: "
                "start a new chat or use fewer slots for longer conversations)",
                "",
            )
        if done.reason == "length":
            return f"(the reply reached max_tokens = {self._sampling.max_tokens})", ""
        if done.reason == "error":
            return f"Error: {done.error}", "-error"
        if not done.text:
            return "(the model ended its reply without writing anything)", ""
        return None

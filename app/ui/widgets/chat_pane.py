"""One chat bound to one engine slot: its conversation, its input box and its slot's status line."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from textual import on
from textual.app import ComposeResult
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static
from textual.worker import Worker

from mlxchat.app.chats.chat import Chat, ChatMessage
from mlxchat.app.chats.conversation import Conversation
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.chats.titles import short_title
from mlxchat.app.files.attachments import Attachment
from mlxchat.app.session.feed import ReplyFeed
from mlxchat.app.session.messages import ChatSeated, Queued, ReplyDone, Withdrawn
from mlxchat.app.session.session import Session
from mlxchat.app.ui import keys, slot_words
from mlxchat.app.ui.reply_frames import ReplyFrames
from mlxchat.app.ui.widgets.chat_input import ChatInput
from mlxchat.app.ui.widgets.file_attacher import FileAttacher, images_dir
from mlxchat.app.ui.widgets.conversation_view import ConversationView, note, user_pictures, user_turn
from mlxchat.app.ui.parts.tool_round import next_round
from mlxchat.app.ui.widgets.pane_keys import PaneKeys
from mlxchat.app.ui.widgets.reasoning_block import LiveReasoning, ReasoningBlock
from mlxchat.app.ui.widgets.reply_view import ReplyView
from mlxchat.app.ui.widgets.save_problem import SaveProblem
from mlxchat.app.ui.widgets.seat_line import SeatLine
from mlxchat.app.ui.widgets.titled_box import TitledBox
from mlxchat.app.ui.widgets.tool_widgets import ToolApproval
from mlxchat.engine import Done, RequestStats, SlotSnapshot

TAB_LABEL_CHARS = 20


class ChatPane(TitledBox, PaneKeys):
    """A chat: user turns, Markdown replies streamed in batches, the input, and the slot's status line.

    The chat itself, its saving and its turns' lifecycle are its Conversation's (app.chats.conversation):
    the pane shows them (ConversationView, SeatLine) and forwards what the user does. The keys that act on
    one chat are its own (scope "pane" in the registry), so they act on the chat that has the keyboard; those
    that open a screen or leave the app are asked of the app (Asked), which carries them out
    (app.ui.parts.chat_actions).
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

    @dataclass
    class Asked(Message):
        """The user asked for `action` of this chat (one that opens a screen or leaves the app: a file, the
        clipboard); the app carries it out on `pane`."""

        pane: ChatPane
        action: str
        args: tuple[str, ...] = field(default_factory=tuple)

    def __init__(self, number: int, chat: Chat, session: Session, store: ChatStore | None, frames: ReplyFrames,
                 keymap: Mapping[str, str]) -> None:
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
        self.request_id: int | None = None
        self._turns_mounted = asyncio.Event()  # set once the last turns sent are on the screen
        self.last_stats: RequestStats | None = None  # the counts and speeds of the last reply
        self._sent_text = ""
        self._user_turn: Static | None = None
        self._reply: ReplyView | None = None
        self._reasoning = LiveReasoning()  # the streaming reply's reasoning block
        self.tool_rounds = 0  # rounds of tool calls since the user's last message
        self.allowed_tools: set[str] = set()  # tools the user allowed for this chat (until it closes)
        self._calling: Worker[None] | None = None  # the reply's round of tool calls, while it runs
        self._feed = ReplyFeed()
        self.seat_line = SeatLine()
        # Held, not queried: a timer (drafts) or a late key can ask for them while the pane is being closed.
        self._box = ChatInput(self.conversation.prompts, text=chat.draft, soft_wrap=True,
                              placeholder="Message · Enter sends · ctrl+j new line · @ attaches a file")
        self._attacher = FileAttacher(self._box, session, lambda: self.app.settings.attach_max_kb, images_dir(store))
        self._undrawn = False  # whether text came that the reply does not show yet (the chat was hidden)

    def compose(self) -> ComposeResult:
        yield ConversationView(self.chat)
        yield SaveProblem(self.save)
        yield self._attacher
        yield self._box
        self.seat_line.idle(self.slot_id, bool(self.chat.messages))
        yield self.seat_line

    @property
    def view(self) -> ConversationView:
        """The conversation as shown."""
        return self.query_one(ConversationView)

    @property
    def chat(self) -> Chat:
        return self.conversation.chat

    @property
    def chat_title(self) -> str:
        """The chat's name for its tab and its slot: its title, short, or "Chat N" while it has none."""
        title = short_title(self.chat.title or f"Chat {self._number}", TAB_LABEL_CHARS)
        return f"{self.variant_label} · {title}" if self.variant_label else title

    @property
    def shown_title(self) -> str:
        """The chat's title as its tab and grid box show it: with its number where another open chat has the same
        title (chats that begin with the same words would look alike)."""
        title = self.chat_title
        siblings = self.parent.children if self.parent is not None else []
        twins = [p for p in siblings if isinstance(p, ChatPane) and p is not self and p.chat_title == title]
        return f"{title} #{self._number}" if twins else title

    @property
    def reply_text(self) -> str:
        """The reply streamed so far (empty when none is being written)."""
        return self.conversation.reply_text

    def save(self) -> bool:
        """Writes what of the chat is unsaved; a failure is shown above the input and retried until it works."""
        return self.conversation.save()

    def _saved(self, ok: bool, first: bool) -> None:
        """After each save: a failure shown and retried until it works, a success clears it; a first id retitles."""
        # query, not query_one: a pane being closed has already lost its children.
        for problem in self.query(SaveProblem).results(SaveProblem):
            problem.failed(self.conversation.save_problem or "") if not ok else problem.worked()
        if ok and first:
            self.post_message(self.Retitled(self))

    def save_reply(self, reason: str | None = None, stats: RequestStats | None = None) -> None:
        """Saves the reply streamed so far, with why it ended and its counts once it has (the app calls this
        before it quits, with reason "cancelled")."""
        self.conversation.save_reply(reason, stats)

    @property
    def slot_id(self) -> int | None:
        """The slot the session seated this chat on; None: it has none (fewer slots than chats)."""
        return self._session.slot_of(self.chat_id)

    @property
    def busy(self) -> bool:
        """Whether a reply is being written (or its request is on its way to the engine, or in the queue)."""
        return self.request_id is not None

    @property
    def awaiting_words(self) -> bool:
        """Whether the reply has written nothing yet while the engine reads its prompt (not waiting in line)."""
        return self.busy and not (self.conversation.reply_parts or self.conversation.reasoning_parts or self.queued)

    @property
    def queued(self) -> bool:
        """Whether the chat's message waits for a slot (every slot is generating)."""
        return self.busy and self._session.place_of(self.chat_id) is not None

    @property
    def attacher(self) -> FileAttacher:
        """The files attached to the message being written."""
        return self._attacher

    @property
    def chat_input(self) -> ChatInput:
        """The message box."""
        return self._box

    @property
    def status_text(self) -> str:
        """What the slot's status line reads now."""
        return self.seat_line.text

    def ask(self, action: str, args: tuple[str, ...] = ()) -> None:
        """Asks the app for `action` of this chat (Asked)."""
        self.post_message(self.Asked(self, action, args))

    def key(self, action_id: str) -> str:
        """The key of an action as the user has it (remappable), for the messages that name it."""
        return keys.key_for(action_id, self._keymap)

    def focus_input(self) -> None:
        """Puts the keyboard in the message box, or in the tool call waiting for the user's approval (nothing, once
        the pane is being closed)."""
        for asked in self.query(ToolApproval).results(ToolApproval):
            self.screen.set_focus(asked)
            return
        for box in self.query(ChatInput).results(ChatInput):
            # At once, not later as Widget.focus does: keys typed right after ctrl+n, queued while the
            # new chat was mounted, must reach its box, not the previous chat's.
            self.screen.set_focus(box)

    def stop_reply(self) -> bool:
        """Asks the session to stop this chat's reply (or its tool calls); False when there is none."""
        if self._calling is not None and self._calling.is_running:
            self._calling.cancel()
            return True
        return self.busy and self._session.stop(self.chat_id)

    @on(ChatInput.AtTyped)
    def _pick_file(self, event: ChatInput.AtTyped) -> None:
        event.stop()
        self.attacher.pick()

    @on(ChatInput.Submitted)
    async def _send(self, event: ChatInput.Submitted) -> None:
        event.stop()
        await self.send(event.text)

    async def send(self, typed: str) -> bool:
        """Sends `typed` as the user's next message (or in place of the one being edited) and asks for
        the reply; False when there is nothing to send or the chat is still answering."""
        text, files = typed.strip(), self.attacher.attachments
        if not text and not files:
            self.notify("Nothing to send: the message box is empty.", severity="warning")
            return False
        if not self.turns_may_change():
            return False
        records = [a.record() for a in files]
        keep = self._session.keep_reasoning
        refusal = self._session.tools.refusal(self.conversation.prompt_with(text, records, keep), self.chat, files)
        if refusal is not None:  # (the message and its files stay where they are)
            await self.view.mount(note(f"Not sent: {refusal}", "-refused"))
            return False
        await self.view.query(".-refused").remove()  # (what an earlier try was told no longer holds)
        self.chat_input.clear()
        self.attacher.tray.put([])
        self._sent_text = typed
        cut, said = self.conversation.cut_for_edit()
        if said:
            self.notify(said[0], severity=said[1])  # type: ignore[arg-type]
        if cut:
            await self.view.show(self.chat.messages)
        titled = bool(self.chat.title)
        self.tool_rounds = 0
        self.conversation.add_message(text, records)
        if not titled and self.chat.id is None:  # (a first save that worked has said so already)
            self.post_message(self.Retitled(self))
        self._user_turn = user_turn(self.chat.messages[-1])
        self._start_reply(self._user_turn, *user_pictures(self.chat.messages[-1], self.app.settings.pictures))
        return True

    def _start_reply(self, *above: Widget) -> None:
        """Asks the engine for a reply to the conversation as it now stands, and has the frames mount
        it, empty, under `above` (one layout for both, in this chat's moment)."""
        self._reply = ReplyView(streaming=True, classes="assistant-turn")
        self._turns_mounted = asyncio.Event()
        self._frames.change(partial(self._mount_turns, [*above, self._reply], self._turns_mounted))
        self._undrawn = False
        self._reasoning = LiveReasoning()
        self.conversation.begin_reply(self._session.model_name)
        # A feed per reply: text still coming for a stopped reply goes to its own feed, not this one.
        self._feed = ReplyFeed()
        self.request_id = self._session.submit(self.chat_id, self.chat.prompt(self._session.keep_reasoning),
                                               self.chat.sampling, self._feed, self._session.tools.listing(self.chat))
        self._frames.wake()

    async def _mount_turns(self, turns: list[Widget], mounted: asyncio.Event) -> None:
        try:
            if self.is_attached:
                await self.view.mount_all(turns)
        finally:
            mounted.set()

    def draw_frame(self, repaint: bool) -> None:
        """Takes the text that came since the last frame and, when `repaint` (this chat's turn on the
        screen), shows the reply with it; saves the reply every second."""
        if self._reply is None:  # the reply has ended: its end is being shown
            return
        for part, text, tokens in self._feed.take():
            if part == "reasoning":
                self.conversation.reasoning_parts.append(text)
                self._reasoning.came(tokens)
            else:
                self.conversation.reply_parts.append(text)
                self._undrawn = True
        self._reasoning.draw(self.view, self._reply, self.conversation.reasoning_text,
                             bool(self.conversation.reply_parts), repaint, self.chat.reasoning_open)
        if repaint and self._undrawn:
            self._undrawn = False
            self._reply.show(self.reply_text)
        if self.conversation.save_due():
            self.save_reply()

    @on(ReasoningBlock.Flipped)
    def _flipped(self, event: ReasoningBlock.Flipped) -> None:
        event.stop()
        self.conversation.keep_reasoning_open(not event.block.collapsed)

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
        block = await self._reasoning.ended(self.view, streamed, done.reasoning)
        self.last_stats = done.stats
        following = streamed.following
        await self._clear_queue_note()
        if done.refused:
            await self._refused(done, streamed)
        else:
            called = bool(done.tool_calls) and done.reason == "stop"
            saved = self.conversation.end_reply(done.text, done.reason, done.stats, done.reasoning, called)
            await self.view.finish(streamed, done, saved, block)
            if called and saved is not None:  # (a task of its own: the user's approval must not hold up the frames)
                self._calling = self.run_worker(self._calls(done, saved, following), exit_on_error=False)
                return
        self._ended(done, following)

    def _ended(self, done: Done, following: bool) -> None:
        self.view.anchor_after_reply(following)
        # Last: whoever waits for the chat to be idle finds how the reply ended on the screen.
        self.request_id = None
        if not done.refused:
            self.post_message(self.Finished(self, done.reason))

    async def _calls(self, done: Done, reply: ChatMessage, following: bool) -> None:
        """Runs the calls the reply ended with; the reply goes on in its slot with their results, or ends (escape
        stops the calls running: they are kept as stopped)."""
        try:
            goes_on = await next_round(self, self._session, done, reply)
        except asyncio.CancelledError:
            goes_on = False
        if goes_on:
            self._user_turn = None  # (the reply goes on: no message of the user's is sent, nor taken back if refused)
            self.view.anchor_after_reply(following)
            self._start_reply()
        else:
            self._ended(done, following)

    async def _refused(self, done: Done, streamed: ReplyView) -> None:
        """Undoes a message the engine would not take: the text goes back to the input with the reason (a reply
        that was to go on after its tool results was sent: it says that it cannot go on)."""
        going_on = self._user_turn is None and self.tool_rounds > 0
        await self._take_back(streamed)
        said = self._session.tools.cannot_go_on(self.chat) if going_on else f"Not sent: {done.error}"
        await self.view.mount(note(said, "-refused"))

    async def _take_back(self, streamed: ReplyView) -> None:
        """Undoes the message just sent (its text goes back to the input) and removes its empty reply."""
        if self._user_turn is not None:  # (a regenerated reply has no new message to take back)
            taken = self.conversation.take_back()
            self._put_back(self._sent_text)
            self.attacher.tray.put([Attachment.from_record(a) for a in taken.attachments])
        for widget in (self._user_turn, *self.view.pictures_under(self._user_turn), streamed):
            if widget is not None:
                await widget.remove()
        self._user_turn = None

    def turns_may_change(self) -> bool:
        """Whether a turn action may change the conversation now; says why not when it may not."""
        if self.busy:
            self.notify(f"This chat is still answering: {self.key('stop_reply')} stops it first.", severity="warning")
        return not self.busy

    async def regenerate(self) -> None:
        """Writes the last reply again; the slot still holds the conversation before it, so only the reply is new."""
        if not self.turns_may_change():
            return
        if not self.chat.messages:
            self.notify("There is no reply to write again yet.", severity="warning")
            return
        self.conversation.drop_last_reply()
        self._user_turn, self.tool_rounds = None, 0
        await self.view.show(self.chat.messages)
        self._start_reply()

    # ---- its seat on the slots ----

    async def on_chat_seated(self, event: ChatSeated) -> None:
        """Says what a new seat means for the chat: in the status line when a slot was lent or taken back for another
        chat (as happens all the time with more chats than slots), in the conversation when the slots changed."""
        if event.slot is not None:
            await self._clear_queue_note()
        self.seat_line.idle(self.slot_id, bool(self.chat.messages))
        if event.lent:
            if event.slot is None:
                self.seat_line.lent(event.before)
            return
        if self.chat.messages:  # an empty chat has no cache to keep or prefill
            await self.view.mount(note(slot_words.seat_note(event.slot, event.before, event.kv_kept)))

    async def on_queued(self, event: Queued) -> None:
        """Shows the message's place in line where its reply will be."""
        await self._turns_mounted.wait()
        if event.request != self.request_id or self._reply is None:
            return
        self._reply.display = False  # (an empty reply still takes room)
        text, line = slot_words.queue_words(event.place, self.key("stop_reply"))
        self.seat_line.say(line)
        await self.view.queue_note(text, before=self._reply)

    async def _clear_queue_note(self) -> None:
        if self._reply is not None:
            self._reply.display = True
        await self.view.clear_queue_note()

    async def on_withdrawn(self, event: Withdrawn) -> None:
        """The message left the queue before it started: it goes back to the input, as if never sent."""
        event.stop()
        await self._turns_mounted.wait()
        if event.request != self.request_id or self._reply is None:
            return
        streamed, self._reply = self._reply, None
        await self._clear_queue_note()
        await self._take_back(streamed)
        self.seat_line.idle(self.slot_id, bool(self.chat.messages))
        self.request_id = None

    def show_slot(self, slot: SlotSnapshot) -> None:
        """Shows the slot's state, how full its context is (as a bar) and its speed."""
        self.seat_line.slot(slot)

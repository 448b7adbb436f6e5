"""A chat's place on the slots, as its pane shows it: the status line, a seat that changed, a place in line."""

from __future__ import annotations

from textual.widgets import Static

from mlxchat.app.session.messages import ChatSeated, Queued, Withdrawn
from mlxchat.app.ui.keys import key_for
from mlxchat.app.ui.widgets import slot_status
from mlxchat.engine import SlotSnapshot
from mlxchat.app.ui.parts import PanePart


class SeatView(PanePart):
    """ChatPane's status line and seat notes (a mixin; its handlers go by name, as Textual finds them on any
    class of a widget's MRO, where @on handlers are collected only from the widget's own class)."""

    def _key(self, action_id: str) -> str:
        """The key of an action as the user has it (remappable), for the messages that name it."""
        return key_for(action_id, self._keymap)

    def _idle_status(self) -> str:
        return slot_status.idle(self.slot_id)

    async def on_chat_seated(self, event: ChatSeated) -> None:
        """Says what a new seat means for the chat: in the status line when a slot was lent or taken
        back for another chat (as happens all the time with more chats than slots), in the
        conversation when the slots changed."""
        if event.slot is not None:
            await self._clear_queue_note()
        self._set_status(self._idle_status())
        if event.lent:
            if event.slot is None:
                self._set_status(slot_status.slot_lent(event.before))
            return
        note = slot_status.seat_note(event.slot, event.before, event.kv_kept)
        if self.chat.messages:  # an empty chat has no cache to keep or prefill
            await self.query_one(".conversation").mount(Static(note, classes="turn-note", markup=False))

    async def on_queued(self, event: Queued) -> None:
        """Shows the message's place in line where its reply will be."""
        await self._turns_mounted.wait()
        if event.request != self.request_id or self._reply is None:
            return
        self._reply.display = False  # (an empty reply still takes room)
        text, line = slot_status.queue_words(event.place, self._key("stop_reply"))
        self._set_status(line)
        note = next(iter(self.query(".queue-note").results(Static)), None)
        if note is None:
            await self.query_one(".conversation").mount(Static(text, classes="queue-note", markup=False),
                                                        before=self._reply)
        else:
            note.update(text)

    async def _clear_queue_note(self) -> None:
        if self._reply is not None:
            self._reply.display = True
        await self.query(".queue-note").remove()

    async def on_withdrawn(self, event: Withdrawn) -> None:
        """The message left the queue before it started: it goes back to the input, as if never sent."""
        event.stop()
        await self._turns_mounted.wait()
        if event.request != self.request_id or self._reply is None:
            return
        streamed, self._reply = self._reply, None
        await self._clear_queue_note()
        await self._take_back(streamed)
        self._set_status(self._idle_status())
        self.request_id = None

    def show_slot(self, slot: SlotSnapshot) -> None:
        """Shows the slot's state, how full its context is (as a bar) and its speed."""
        self._set_status(slot_status.slot_line(slot))

    def _set_status(self, text: str) -> None:
        if text == self._status:  # (an idle app redraws nothing)
            return
        self._status = text
        # query, not query_one: a pane being closed has already lost its children.
        for status in self.query(".slot-status").results(Static):
            # One line of fixed height: no layout pass, which with many panes streaming costs the
            # UI thread far more than drawing the line (a whole-screen layout per update).
            status.update(text, layout=False)

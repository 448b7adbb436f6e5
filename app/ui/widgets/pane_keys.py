"""The keys that act on one chat (scope "pane" in the registry): the chat's own bindings, as methods of its pane,
and the editing of its messages they start."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.widget import Widget
from textual.widgets import TabPane

from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.conversation import Conversation
from mlxchat.app.files.attachments import Attachment
from mlxchat.app.ui.widgets.chat_input import ChatInput
from mlxchat.app.ui.widgets.conversation_view import ConversationView
from mlxchat.app.ui.widgets.file_attacher import FileAttacher


class PaneKeys(TabPane):
    """The action methods of a chat's keys: those that change the chat run here, those that open a screen or
    leave the app (a file, the clipboard) are asked of the app (ChatPane.Asked)."""

    # What the keys act on, as ChatPane has it: its chat and conversation, their view, the message box and its files.
    conversation: Conversation
    chat: Chat
    view: ConversationView
    chat_input: ChatInput
    attacher: FileAttacher
    # What they run or ask of ChatPane: a reply again, whether turns may change now, a key's name, the box focused, an
    # action asked of the app (ChatPane.Asked).
    regenerate: Callable[[], Awaitable[None]]
    turns_may_change: Callable[[], bool]
    key: Callable[[str], str]
    focus_input: Callable[[], None]
    ask: Callable[..., None]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Only on the chats' screen (the palette runs them over other screens too)."""
        return len(self.app.screen_stack) == 1

    async def action_regenerate(self) -> None:
        """Writes the chat's last reply again."""
        await self.regenerate()

    def action_edit_last(self) -> None:
        """Puts the chat's last user message back in the input, to edit and send again."""
        self.edit_last()

    def action_clear_input(self) -> None:
        """Empties the message box (an undoable edit of the box: ctrl+z brings the text back)."""
        box = self.chat_input
        if box.text:
            box.replace("", box.document.start, box.document.end)
        self.focus_input()

    def action_remove_attachment(self) -> None:
        """Takes the last attached file off the message being written."""
        self.attacher.remove_last()

    def action_toggle_reasoning(self) -> None:
        """Opens or folds the reasoning of the chat's last reply; the chat keeps that choice for its replies."""
        block = self.view.last_reasoning()
        if block is None:
            self.notify("The last reply has no reasoning to show.", severity="warning")
            return
        block.collapsed = not block.collapsed
        self.conversation.keep_reasoning_open(not block.collapsed)

    def action_toggle_tools(self) -> None:
        """Opens the tool calls of the chat's last reply on their arguments and results, or folds them."""
        entries = self.view.last_tool_entries()
        if not entries:
            self.notify("The last reply called no tool.", severity="warning")
            return
        opening = any(entry.collapsed for entry in entries)
        for entry in entries:
            entry.collapsed = not opening
        if opening:
            entries[0].scroll_visible(animate=False)

    def action_copy_reply(self) -> None:
        """Copies the chat's last reply to the clipboard."""
        self.ask("copy_reply")

    def action_edit_earlier(self) -> None:
        """Picks one of the chat's user messages to edit and send again."""
        self.ask("edit_earlier")

    def action_fork_chat(self) -> None:
        """Picks a message of the chat to branch it at, into a new chat."""
        self.ask("fork_chat")

    def action_find_in_chat(self, text: str = "") -> None:
        """Opens the find bar over the chat (looking for `text`, when given)."""
        self.ask("find_in_chat", (text,))

    def action_copy_code(self) -> None:
        """Copies a code block of the chat's replies: the only one at once, else the one picked."""
        self.ask("copy_code")

    def action_chat_settings(self) -> None:
        """Edits the chat's system prompt and sampling (they apply from its next turn)."""
        self.ask("chat_settings")

    def action_export_chat(self) -> None:
        """Writes the chat as Markdown to a file in the current folder."""
        self.ask("export_chat")

    def edit_last(self) -> None:
        """Puts the last user message in the input: sending it replaces that message and its reply.

        Called again before sending, it cancels the edit.
        """
        if not self.turns_may_change():
            return
        if self.conversation.editing:
            self.cancel_edit()
            return
        if not self.conversation.user_messages:
            self.notify("There is no message of yours to edit yet.", severity="warning")
            return
        self.edit_message(self.conversation.user_messages[-1])
        self.notify("Editing your last message: Enter sends it in place of the old one and its reply "
                    f"({self.key('edit_last')} again cancels).")

    def edit_message(self, index: int, keep_branch: bool = False) -> None:
        """Puts user message `index` in the input: sending it replaces that message and every turn after
        it (the slot's KV rolls back to what they share). With `keep_branch` the conversation as it
        was is first saved as a chat of its own."""
        if not self.turns_may_change():
            return
        before = self.conversation.begin_edit(index, keep_branch)
        if before is not None:
            self._turn_of(before).remove_class("-editing")
        self._turn_of(index).add_class("-editing")
        self._put_back(self.chat.messages[index].text)
        for record in self.chat.messages[index].attachments:  # (its files come back as chips, beside any new)
            self.attacher.tray.add(Attachment.from_record(record))
        self.focus_input()

    def cancel_edit(self) -> None:
        """Leaves the conversation as it was: the message being edited stays."""
        before = self.conversation.cancel_edit()
        if before is not None:
            self._turn_of(before).remove_class("-editing")
            self.notify("Edit cancelled: the conversation stays as it was.")

    def _put_back(self, text: str) -> None:
        """Puts `text` in the input, before anything typed there since."""
        typed_since = self.chat_input.text
        self.chat_input.text = text + (f"\n{typed_since}" if typed_since else "")
        self.chat_input.move_cursor(self.chat_input.document.end)

    def _turn_of(self, index: int) -> Widget:
        """The box of user message `index` in the conversation."""
        return self.view.user_turn(self.conversation.user_messages.index(index))

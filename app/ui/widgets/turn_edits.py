"""Editing a chat's earlier messages from its pane: which message is in the input, and taking the edit back."""

from __future__ import annotations

from textual.widget import Widget

from mlxchat.app.ui.parts import PanePart


class TurnEdits(PanePart):
    """ChatPane's message edits (a mixin: the conversation holds which message is edited)."""

    @property
    def user_messages(self) -> list[int]:
        """The indexes of the user's messages in the chat, first to last."""
        return self.conversation.user_messages

    @property
    def editing(self) -> bool:
        """Whether one of the user's messages is in the input, to be sent in its place."""
        return self.conversation.edit_from is not None

    def edit_last(self) -> None:
        """Puts the last user message in the input: sending it replaces that message and its reply.

        Called again before sending, it cancels the edit.
        """
        if not self.turns_may_change():
            return
        if self.editing:
            self.cancel_edit()
            return
        if not self.user_messages:
            self.notify("There is no message of yours to edit yet.", severity="warning")
            return
        self.edit_message(self.user_messages[-1])
        self.notify("Editing your last message: Enter sends it in place of the old one and its reply "
                    f"({self._key('edit_last')} again cancels).")

    def edit_message(self, index: int, keep_branch: bool = False) -> None:
        """Puts user message `index` in the input: sending it replaces that message and every turn after
        it (the slot's KV rolls back to what they share). With `keep_branch` the conversation as it
        was is first saved as a chat of its own."""
        if not self.turns_may_change():
            return
        if self.editing:
            self.cancel_edit(quiet=True)
        self.conversation.edit_from, self.conversation.keep_branch = index, keep_branch
        self._turn_of(index).add_class("-editing")
        self._put_back(self.chat.messages[index].text)
        self.focus_input()

    def cancel_edit(self, quiet: bool = False) -> None:
        """Leaves the conversation as it was: the message being edited stays."""
        if self.conversation.edit_from is None:
            return
        self._turn_of(self.conversation.edit_from).remove_class("-editing")
        self.conversation.edit_from, self.conversation.keep_branch = None, False
        if not quiet:
            self.notify("Edit cancelled: the conversation stays as it was.")

    def _turn_of(self, index: int) -> Widget:
        """The box of user message `index` in the conversation."""
        return list(self.query(".user-turn"))[self.user_messages.index(index)]

"""A chat's actions on its turns (regenerate, edit, fork, copy, find, settings, export), on its own keys."""

from __future__ import annotations

from pathlib import Path

from mlxchat.app.chats.code_blocks import CodeBlock, chat_code_blocks
from mlxchat.app.chats.export import to_markdown
from mlxchat.app.chats.fork import fork, fork_point
from mlxchat.app.chats.private import write_private
from mlxchat.app.ui import keys
from mlxchat.app.ui.screens.chat_settings import ChatSettings, ChatSettingsScreen
from mlxchat.app.ui.screens.code_picker import CodePickerScreen
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.find import FindScreen
from mlxchat.app.ui.screens.turn_picker import TurnPickerScreen
from mlxchat.app.ui.parts import PanePart


class TurnActions(PanePart):
    """ChatPane's actions on its chat's turns, bound to the pane's own keys: they act on the chat that has
    the keyboard (a mixin: ChatPane is what it runs on)."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Only on the chats' screen (the palette runs them over other screens too)."""
        return len(self.app.screen_stack) == 1

    async def action_regenerate(self) -> None:
        """Writes the chat's last reply again."""
        await self.regenerate()

    def action_edit_last(self) -> None:
        """Puts the chat's last user message back in the input, to edit and send again."""
        self.edit_last()

    def action_edit_earlier(self) -> None:
        """Picks one of the chat's user messages to edit and send again."""
        if not self.turns_may_change():
            return
        if not self.user_messages:
            self.notify("There is no message of yours to edit yet.", severity="warning")
            return
        self.app.push_screen(TurnPickerScreen(
            f"Edit which of your messages in “{self.chat_title}”?",
            "Enter puts it in the message box: sending it replaces it and every turn after it · escape cancels",
            self.chat.messages, self.user_messages), self._edit_earlier)

    def _edit_earlier(self, index: int | None) -> None:
        """Edits user message `index`: an earlier one than the last after a confirmation, the conversation
        as it was kept as a chat of its own."""
        if index is None or not self.is_attached:
            return
        key = keys.key_for("edit_last", self._keymap)
        if index == self.user_messages[-1]:
            self.edit_message(index)
            self.notify(f"Editing your last message: Enter sends it in place of the old one and its reply "
                        f"({key} cancels).")
            return
        after = len(self.chat.messages) - index - 1
        title = self.chat.title or self.chat_title

        def confirmed(yes: bool | None) -> None:
            if yes and self.is_attached:
                self.edit_message(index, keep_branch=True)
                self.notify(f"Editing message {index + 1}: Enter sends it in place of the old one and the "
                            f"{after} turns after it ({key} cancels).")

        self.app.push_screen(ConfirmScreen(
            f"Edit message {index + 1} of “{self.chat_title}”?",
            f"Sending it drops the {after} turns after it from this chat; the conversation as it is now "
            f"stays saved as “{title} (before edit)” in the chat list.", "Edit"), confirmed)

    def action_fork_chat(self) -> None:
        """Picks a message of the chat to branch it at, into a new chat."""
        if not self.turns_may_change():
            return
        if not self.chat.messages:
            self.notify("There is nothing to fork yet: the chat has no messages.", severity="warning")
            return
        messages = self.chat.messages
        self.app.push_screen(TurnPickerScreen(
            f"Fork “{self.chat_title}” at which message?",
            "Enter forks at the message under the cursor: at a reply the new chat keeps it; at one of yours it "
            "stops before it and puts it in the message box · escape cancels",
            messages, range(len(messages))), self._fork)

    def _fork(self, index: int | None) -> None:
        """Asks the app to open, saved, a new chat with this conversation up to message `index`."""
        if index is None or not self.is_attached:
            return
        keep, text = fork_point(self.chat, index)
        self.post_message(self.Forked(fork(self.chat, keep), text))

    def action_copy_reply(self) -> None:
        """Copies the chat's last reply to the clipboard."""
        self.copy_reply()

    def action_find_in_chat(self, text: str = "") -> None:
        """Opens the find bar over the chat (looking for `text`, when given)."""
        self.app.push_screen(FindScreen(self.screen, self.query_one(".conversation"), text),
                             lambda _: self.focus_input())

    def action_copy_code(self) -> None:
        """Copies a code block of the chat's replies: the only one at once, else the one picked."""
        blocks = chat_code_blocks(self.chat)
        if not blocks:
            self.notify("This chat's replies hold no code block yet.", severity="warning")
        elif len(blocks) == 1:
            self._copy_code(blocks[0])
        else:
            self.app.push_screen(CodePickerScreen(blocks), self._copy_code)

    def _copy_code(self, block: CodeBlock | None) -> None:
        if block is not None:
            self.app.copy_to_clipboard(block.code)
            self.notify(f"Copied a {block.describe()}, from reply {block.reply}.")

    def action_chat_settings(self) -> None:
        """Edits the chat's system prompt and sampling (they apply from its next turn)."""

        def apply(settings: ChatSettings | None) -> None:
            if settings is not None and self.is_attached:
                self.apply_settings(settings.system_prompt, settings.sampling)

        self.app.push_screen(
            ChatSettingsScreen(self.chat_title, ChatSettings(self.chat.system_prompt, self.chat.sampling)), apply
        )

    def action_export_chat(self) -> None:
        """Writes the chat as Markdown to mlxchat-chat-ID.md in the current folder, readable by its owner only."""
        path = Path.cwd() / f"mlxchat-chat-{self.chat.id if self.chat.id is not None else 'unsaved'}.md"
        try:
            write_private(path, to_markdown(self.chat))
        except OSError as exc:
            self.notify(f"Could not export to {path}: {exc.strerror}", severity="error")
            return
        self.notify(f"Exported to {path}")

"""The actions on the shown chat's turns (stop, regenerate, edit, fork, copy, find, settings, export), for ChatApp."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from mlxchat.app.chats.code_blocks import CodeBlock, chat_code_blocks
from mlxchat.app.chats.errors import StoreWriteError
from mlxchat.app.chats.export import to_markdown
from mlxchat.app.chats.fork import fork, fork_point
from mlxchat.app.chats.private import write_private
from mlxchat.app.ui import keys
from mlxchat.app.ui.screens.chat_settings import ChatSettings, ChatSettingsScreen
from mlxchat.app.ui.screens.code_picker import CodePickerScreen
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.find import FindScreen
from mlxchat.app.ui.screens.turn_picker import TurnPickerScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.app.ui.parts import AppPart


class TurnActions(AppPart):
    """ChatApp's actions on the shown chat's turns (a mixin: ChatApp is what it runs on)."""

    def action_stop_reply(self) -> None:
        """Stops the shown chat's reply; what was written stays, marked as stopped."""
        pane = self.active_chat
        if pane is not None:
            pane.stop_reply()

    async def action_regenerate(self) -> None:
        """Writes the shown chat's last reply again."""
        if self.active_chat is not None:
            await self.active_chat.regenerate()

    def action_edit_last(self) -> None:
        """Puts the shown chat's last user message back in the input, to edit and send again."""
        if self.active_chat is not None:
            self.active_chat.edit_last()

    def action_edit_earlier(self) -> None:
        """Picks one of the shown chat's user messages to edit and send again."""
        pane = self.active_chat
        if pane is None or not pane.turns_may_change():
            return
        if not pane.user_messages:
            self.notify("There is no message of yours to edit yet.", severity="warning")
            return
        self.push_screen(TurnPickerScreen(
            f"Edit which of your messages in “{pane.chat_title}”?",
            "Enter puts it in the message box: sending it replaces it and every turn after it · escape cancels",
            pane.chat.messages, pane.user_messages), partial(self._edit_earlier, pane))

    def _edit_earlier(self, pane: ChatPane, index: int | None) -> None:
        """Edits user message `index`: an earlier one than the last after a confirmation, the conversation
        as it was kept as a chat of its own."""
        if index is None or not pane.is_attached:
            return
        key = keys.key_for("edit_last", self.settings.keys)
        if index == pane.user_messages[-1]:
            pane.edit_message(index)
            self.notify(f"Editing your last message: Enter sends it in place of the old one and its reply "
                        f"({key} cancels).")
            return
        after = len(pane.chat.messages) - index - 1
        title = pane.chat.title or pane.chat_title

        def confirmed(yes: bool | None) -> None:
            if yes and pane.is_attached:
                pane.edit_message(index, keep_branch=True)
                self.notify(f"Editing message {index + 1}: Enter sends it in place of the old one and the "
                            f"{after} turns after it ({key} cancels).")

        self.push_screen(ConfirmScreen(
            f"Edit message {index + 1} of “{pane.chat_title}”?",
            f"Sending it drops the {after} turns after it from this chat; the conversation as it is now "
            f"stays saved as “{title} (before edit)” in the chat list.", "Edit"), confirmed)

    def action_fork_chat(self) -> None:
        """Picks a message of the shown chat to branch it at, into a new chat."""
        pane = self.active_chat
        if pane is None or not pane.turns_may_change():
            return
        if not pane.chat.messages:
            self.notify("There is nothing to fork yet: the chat has no messages.", severity="warning")
            return
        messages = pane.chat.messages
        self.push_screen(TurnPickerScreen(
            f"Fork “{pane.chat_title}” at which message?",
            "Enter forks at the message under the cursor: at a reply the new chat keeps it; at one of yours it "
            "stops before it and puts it in the message box · escape cancels",
            messages, range(len(messages))), partial(self._fork, pane))

    async def _fork(self, pane: ChatPane, index: int | None) -> None:
        """Opens, saved, a new chat with `pane`'s conversation up to message `index`."""
        if index is None or not pane.is_attached:
            return
        keep, text = fork_point(pane.chat, index)
        chat = fork(pane.chat, keep)
        if self.store is not None:
            try:
                self.store.save(chat)
            except StoreWriteError as exc:
                self.notify(str(exc), severity="error")
        new = await self.open_chat(chat)
        if new is None:
            return
        new.chat_input.text = text
        new.chat_input.move_cursor(new.chat_input.document.end)
        self._record_open_chats()

    def action_toggle_timings(self) -> None:
        """Shows or hides every reply's timings line, in every chat (and in chats opened later)."""
        self.show_timings = not self.show_timings
        for pane in self.chat_panes:
            pane.set_class(self.show_timings, "-timings")

    def action_copy_reply(self) -> None:
        """Copies the shown chat's last reply to the clipboard."""
        if self.active_chat is not None:
            self.active_chat.copy_reply()

    def action_find_in_chat(self, text: str = "") -> None:
        """Opens the find bar over the shown chat (looking for `text`, when given)."""
        pane = self.active_chat
        if pane is not None:
            self.push_screen(FindScreen(self.screen, pane.query_one(".conversation"), text),
                             lambda _: pane.focus_input())

    def action_copy_code(self) -> None:
        """Copies a code block of the shown chat's replies: the only one at once, else the one picked."""
        pane = self.active_chat
        if pane is None:
            return
        blocks = chat_code_blocks(pane.chat)
        if not blocks:
            self.notify("This chat's replies hold no code block yet.", severity="warning")
        elif len(blocks) == 1:
            self._copy_code(blocks[0])
        else:
            self.push_screen(CodePickerScreen(blocks), self._copy_code)

    def _copy_code(self, block: CodeBlock | None) -> None:
        if block is not None:
            self.copy_to_clipboard(block.code)
            self.notify(f"Copied a {block.describe()}, from reply {block.reply}.")

    def action_chat_settings(self) -> None:
        """Edits the shown chat's system prompt and sampling (they apply from its next turn)."""
        pane = self.active_chat
        if pane is None:
            return

        def apply(settings: ChatSettings | None) -> None:
            if settings is not None and pane.is_attached:
                pane.apply_settings(settings.system_prompt, settings.sampling)

        self.push_screen(ChatSettingsScreen(pane.chat_title, ChatSettings(pane.chat.system_prompt, pane.chat.sampling)),
                         apply)

    def action_export_chat(self) -> None:
        """Writes the shown chat as Markdown to mlxchat-chat-ID.md in the current folder, readable by its owner only."""
        pane = self.active_chat
        if pane is None:
            return
        path = Path.cwd() / f"mlxchat-chat-{pane.chat.id if pane.chat.id is not None else 'unsaved'}.md"
        try:
            write_private(path, to_markdown(pane.chat))
        except OSError as exc:
            self.notify(f"Could not export to {path}: {exc.strerror}", severity="error")
            return
        self.notify(f"Exported to {path}")

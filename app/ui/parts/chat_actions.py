"""A chat's actions that open screens or leave the app (edit an earlier message, fork, find, copy a reply or
code, settings, export): the pane asks for them with a message and the app's ChatActions carries them out."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from textual.app import App

from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.code_blocks import CodeBlock, chat_code_blocks
from mlxchat.app.chats.export import to_markdown
from mlxchat.app.chats.fork import fork, fork_point
from mlxchat.app.chats.private import write_private
from mlxchat.app.session.session import Session
from mlxchat.app.tools.servers import Tool
from mlxchat.app.ui.screens.chat_settings import ChatSettings, ChatSettingsScreen
from mlxchat.app.ui.screens.code_picker import CodePickerScreen
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.find import FindScreen
from mlxchat.app.ui.screens.turn_picker import TurnPickerScreen
from mlxchat.app.ui.parts.server_notes import restart_server
from mlxchat.app.ui.widgets.chat_pane import ChatPane


class ChatActions:
    """Carries out what a chat pane asks for (ChatPane.Asked), on that pane: the screens it opens, and
    what their answers do to the chat."""

    def __init__(self, app: App[int], session: Session) -> None:
        self.app = app
        self.session = session  # what the model can do (its thinking switch)

    def run(self, event: ChatPane.Asked) -> None:
        """Runs the action `event` names on its pane."""
        getattr(self, event.action)(event.pane, *event.args)

    def edit_earlier(self, pane: ChatPane) -> None:
        """Picks one of the chat's user messages to edit and send again."""
        if not pane.turns_may_change():
            return
        if not pane.conversation.user_messages:
            pane.notify("There is no message of yours to edit yet.", severity="warning")
            return
        self.app.push_screen(TurnPickerScreen(
            f"Edit which of your messages in “{pane.chat_title}”?",
            "Enter puts it in the message box: sending it replaces it and every turn after it · escape cancels",
            pane.chat.messages, pane.conversation.user_messages), lambda index: self._edit_earlier(pane, index))

    def _edit_earlier(self, pane: ChatPane, index: int | None) -> None:
        """Edits user message `index`: an earlier one than the last after a confirmation, the conversation
        as it was kept as a chat of its own."""
        if index is None or not pane.is_attached:
            return
        key = pane.key("edit_last")
        if index == pane.conversation.user_messages[-1]:
            pane.edit_message(index)
            pane.notify(f"Editing your last message: Enter sends it in place of the old one and its reply "
                        f"({key} cancels).")
            return
        after = len(pane.chat.messages) - index - 1
        title = pane.chat.title or pane.chat_title

        def confirmed(yes: bool | None) -> None:
            if yes and pane.is_attached:
                pane.edit_message(index, keep_branch=True)
                pane.notify(f"Editing message {index + 1}: Enter sends it in place of the old one and the "
                            f"{after} turns after it ({key} cancels).")

        self.app.push_screen(ConfirmScreen(
            f"Edit message {index + 1} of “{pane.chat_title}”?",
            f"Sending it drops the {after} turns after it from this chat; the conversation as it is now "
            f"stays saved as “{title} (before edit)” in the chat list.", "Edit"), confirmed)

    def fork_chat(self, pane: ChatPane) -> None:
        """Picks a message of the chat to branch it at, into a new chat."""
        if not pane.turns_may_change():
            return
        if not pane.chat.messages:
            pane.notify("There is nothing to fork yet: the chat has no messages.", severity="warning")
            return
        messages = pane.chat.messages
        self.app.push_screen(TurnPickerScreen(
            f"Fork “{pane.chat_title}” at which message?",
            "Enter forks at the message under the cursor: at a reply the new chat keeps it; at one of yours it "
            "stops before it and puts it in the message box · escape cancels",
            messages, range(len(messages))), lambda index: self._fork(pane, index))

    def _fork(self, pane: ChatPane, index: int | None) -> None:
        """Asks the app to open, saved, a new chat with this conversation up to message `index`."""
        if index is None or not pane.is_attached:
            return
        keep, text = fork_point(pane.chat, index)
        pane.post_message(pane.Forked(fork(pane.chat, keep), text))

    def find_in_chat(self, pane: ChatPane, text: str = "") -> None:
        """Opens the find bar over the chat (looking for `text`, when given)."""
        self.app.push_screen(FindScreen(pane.screen, pane.query_one(".conversation"), text),
                             lambda _: pane.focus_input())

    def copy_code(self, pane: ChatPane) -> None:
        """Copies a code block of the chat's replies: the only one at once, else the one picked."""
        blocks = chat_code_blocks(pane.chat)
        if not blocks:
            pane.notify("This chat's replies hold no code block yet.", severity="warning")
        elif len(blocks) == 1:
            self._copy_code(pane, blocks[0])
        else:
            self.app.push_screen(CodePickerScreen(blocks), lambda block: self._copy_code(pane, block))

    def _copy_code(self, pane: ChatPane, block: CodeBlock | None) -> None:
        if block is not None:
            self.app.copy_to_clipboard(block.code)
            pane.notify(copied(f"a {block.describe()}, from reply {block.reply}"))

    def chat_settings(self, pane: ChatPane) -> None:
        """Edits the chat's system prompt and sampling (they apply from its next turn)."""

        servers = self.session.tools.servers

        def apply(settings: ChatSettings | None) -> None:
            if settings is not None and pane.is_attached:
                pane.conversation.apply_settings(settings.system_prompt, settings.sampling, settings.tools_off,
                                                 settings.tools_on)
                pane.notify("The chat's settings apply from its next turn.")

        chat, session = pane.chat, self.session
        self.app.push_screen(
            ChatSettingsScreen(pane.chat_title,
                               ChatSettings(chat.system_prompt, chat.sampling, chat.tools_off, chat.tools_on),
                               thinking_switch=session.thinking_switch,
                               room=lambda offered: room_line(session, chat, offered),
                               tools=session.tools.available_tools(),
                               on={t.key for t in session.tools.offered_tools(chat)},
                               defaults={t.key for t in session.tools.offered_tools()},
                               failed=[s for s in servers.states() if s.status == "failed"] if servers else [],
                               restart=partial(restart_server, servers, self.app.notify),
                               draft=session.draft_model),
            apply
        )

    def copy_reply(self, pane: ChatPane) -> None:
        """Copies the chat's last reply to the clipboard."""
        reply = pane.conversation.last_reply()
        if reply is None:
            pane.notify("There is no reply to copy yet.", severity="warning")
            return
        self.app.copy_to_clipboard(reply.text)
        pane.notify(copied(f"the last reply ({len(reply.text)} characters)"))

    def export_chat(self, pane: ChatPane) -> None:
        """Writes the chat as Markdown to mlxchat-chat-ID.md in the current folder, readable by its owner only."""
        path = Path.cwd() / f"mlxchat-chat-{pane.chat.id if pane.chat.id is not None else 'unsaved'}.md"
        try:
            write_private(path, to_markdown(pane.chat))
        except OSError as exc:
            pane.notify(f"Could not export to {path}: {exc.strerror}", severity="error")
            return
        pane.notify(f"Exported to {path}")


def room_line(session: Session, chat: Chat, offered: list[Tool] | None = None) -> str:
    """What the chat takes of its slot before its first message: its system prompt and the tool listing (of its tools,
    or `offered`)."""
    tools = session.tools.listing(chat, offered)
    if session.tools.servers is not None and session.tools.servers.tools() and not session.takes_tools:
        listing = "the model's chat template takes no tools: none are offered to it"
    else:
        listing = f"{len(tools.offered)} tool{'s' if len(tools.offered) != 1 else ''} offered"
    if tools.deferred:
        listing += f", searched: all would take {tools.tokens:,}, over mcp.tool_listing_max_tokens = {tools.budget:,}"
    counted = session.tools.listing_tokens(chat.system_prompt, chat, offered)
    if counted is None or session.plan is None:
        return f"{listing.capitalize()}."
    whole, tools_part = counted
    return (f"Before its first message this chat takes {whole:,} tokens of its slot's {session.plan.per_slot:,}: "
            f"the template, the system prompt and the tool listing ({tools_part:,} of them; {listing}).")


def copied(what: str) -> str:
    """What a copy says: it goes through the terminal (OSC 52), which may not pass it on, and mlxchat cannot tell."""
    return f"Copied {what} through the terminal (OSC 52): a terminal without it, or tmux without set-clipboard on, " \
           "keeps the clipboard as it was."

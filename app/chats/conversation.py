"""One chat's conversation and its lifecycle, with no Textual: what is sent, streamed, saved, edited, taken back.

The pane (app.ui.widgets.chat_pane) shows a Conversation and forwards the user's actions to it;
the Conversation owns the Chat, talks to the session for its replies and to the store for saving.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from mlxchat.app.chats.errors import StoreWriteError
from mlxchat.app.chats.fork import BEFORE_EDIT_SUFFIX, fork
from mlxchat.app.chats.chat import Chat, ChatMessage, now, title_from
from mlxchat.app.chats.store import ChatStore
from mlxchat.engine import RequestStats, SamplingParams

SAVE_INTERVAL_S = 1.0  # a streaming reply is saved at most this often: a crash loses at most this much of it
SAVE_RETRY_S = 5.0  # after a failed save (disk full, read-only), how often saving is tried again


class Conversation:
    """A chat being had: the messages, the reply streaming into it, an edit in progress, and its saving."""

    def __init__(self, chat: Chat, store: ChatStore | None, on_save: Callable[[bool, bool], None]) -> None:
        """`on_save(saved, first)` hears of every save: whether it worked, and whether it gave the chat its id."""
        self.chat = chat
        self.store = store
        self._on_save = on_save
        self.reply_parts: list[str] = []  # the reply streamed so far: its answer
        self.reasoning_parts: list[str] = []  # and its reasoning
        self._reply_message: ChatMessage | None = None  # where it is saved, once it has text
        self._reply_model = ""  # the model writing it
        self.edit_from: int | None = None  # the user message being edited, replaced when the input is sent
        self.keep_branch = False  # whether sending that edit first saves the conversation as it was, as a chat
        self.save_problem: str | None = None  # why the last save failed, until one works
        self._last_save = 0.0

    # ---- saving ----

    def save(self) -> bool:
        """Writes what of the chat is unsaved; False (and `save_problem` says why) when it could not."""
        if self.store is None:
            return False
        had_id = self.chat.id is not None
        # Counted from the attempt: a failing disk is tried again every second while a reply streams, not every frame.
        self._last_save = time.monotonic()
        try:
            self.store.save(self.chat)
        except StoreWriteError as exc:
            self.save_problem = f"{exc}. The text is kept here and saving is retried every {SAVE_RETRY_S:g} s."
            self._on_save(False, False)
            return False
        self.save_problem = None
        self._on_save(True, not had_id)
        return True

    def save_due(self) -> bool:
        """Whether a streaming reply is due to be saved again."""
        return time.monotonic() - self._last_save >= SAVE_INTERVAL_S

    def save_reply(self, reason: str | None = None, stats: RequestStats | None = None,
                   called: bool = False) -> ChatMessage | None:
        """Saves the reply streamed so far, with why it ended and its counts once it has; returns it (None while
        it has no text). `called`: it ended with tool calls, which it holds even without text."""
        if not (self.reply_parts or self.reasoning_parts or called):
            return None
        if self._reply_message is None:
            self._reply_message = self.chat.add("assistant", "", model=self._reply_model)
        message = self._reply_message
        message.text, message.finish_reason, message.updated, message.saved = self.reply_text, reason, now(), False
        message.reasoning = self.reasoning_text
        self.chat.touch()
        if stats is not None:
            if stats.reasoning_tokens or message.reasoning:
                message.reasoning_tokens = stats.reasoning_tokens
                message.reasoning_ms = round(1000 * stats.reasoning_s, 1)
            message.prompt_tokens, message.generated_tokens = stats.prompt_tokens, stats.generated_tokens
            message.cached_tokens, message.cached_from = stats.cached_tokens, stats.cached_from
            message.ttft_ms = round(1000 * stats.ttft_s, 1) if stats.ttft_s else None
            message.decode_tok_s = round(stats.decode_tok_s, 2) if stats.decode_tok_s else None
            if stats.drafted_tokens:
                message.drafted_tokens, message.accepted_tokens = stats.drafted_tokens, stats.accepted_tokens
        self.save()
        return message

    # ---- a reply ----

    @property
    def reply_text(self) -> str:
        return "".join(self.reply_parts)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning_parts)

    def begin_reply(self, model: str) -> None:
        """A new reply is about to stream, written by `model` (nothing of it is saved yet)."""
        self._reply_model = model
        self._forget_stream()

    def _forget_stream(self) -> None:
        self.reply_parts.clear()
        self.reasoning_parts.clear()
        self._reply_message = None

    def end_reply(self, text: str, reason: str, stats: RequestStats, reasoning: str = "",
                  called: bool = False) -> ChatMessage | None:
        """Saves the reply as the engine ended it (its own whole answer and reasoning) and forgets the stream;
        returns the reply as the chat keeps it (None for a reply with nothing in it)."""
        self.reply_parts = [text] if text else []
        self.reasoning_parts = [reasoning] if reasoning else []
        saved = self.save_reply(reason, stats, called)
        self._forget_stream()
        return saved

    def kept(self, message: ChatMessage) -> None:
        """Saves a message changed in place (a reply's tool calls, once they ran)."""
        message.saved = False
        self.chat.touch()
        self.save()

    def keep_reasoning_open(self, reasoning_open: bool) -> None:
        """Remembers whether the chat's reasoning blocks show open (saved at once where the chat is)."""
        self.chat.reasoning_open = reasoning_open
        if self.store is not None and self.chat.id is not None:
            with contextlib.suppress(StoreWriteError):  # (a view, worth no warning)
                self.store.save_reasoning_open(self.chat.id, reasoning_open)

    # ---- the user's turns ----

    @property
    def editing(self) -> bool:
        """Whether one of the user's messages is in the input, to be sent in its place."""
        return self.edit_from is not None

    def begin_edit(self, index: int, keep_branch: bool = False) -> int | None:
        """User message `index` is being edited: sending replaces it and every turn after it. With
        `keep_branch` the conversation as it was is first saved as a chat of its own. Returns the
        message that was being edited before, if any."""
        before = self.cancel_edit()
        self.edit_from, self.keep_branch = index, keep_branch
        return before

    def cancel_edit(self) -> int | None:
        """No message is being edited any more; returns the one that was, if any."""
        before, self.edit_from, self.keep_branch = self.edit_from, None, False
        return before

    def cut_for_edit(self) -> tuple[bool, tuple[str, str] | None]:
        """Before an edited message is sent: the message it replaces and everything after it go. Returns
        whether an edit was in progress, and what to tell the user (text, severity) when the edit kept the
        conversation as it was, as a chat of its own in the chat list (or failed to)."""
        if self.edit_from is None:
            return False, None
        said = None
        if self.keep_branch and self.store is not None:
            old = fork(self.chat, len(self.chat.messages), BEFORE_EDIT_SUFFIX)
            try:
                self.store.save(old)
                said = (f"The conversation before the edit is kept as “{old.title}” in the chat list.",
                        "information")
            except StoreWriteError as exc:
                said = (f"The conversation before the edit could not be kept: {exc}", "error")
        del self.chat.messages[self.edit_from :]
        self.chat.touch()
        self.cancel_edit()
        return True, said

    def add_message(self, text: str, attachments: list[dict[str, Any]] | None = None) -> None:
        """Adds the user's message (with the records of the files attached to it), saved at once: a crash from here
        on never loses what the user wrote."""
        self.chat.add("user", text, attachments)
        self.chat.draft = ""  # (sent: no longer a draft)
        self.save()

    def prompt_with(self, text: str, attachments: list[dict[str, Any]], keep_reasoning: bool) -> list[dict[str, Any]]:
        """The conversation as the engine would read it with `text` (and its files) sent next, in place of the message
        being edited if one is."""
        kept = self.chat.messages if self.edit_from is None else self.chat.messages[: self.edit_from]
        shadow = dataclasses.replace(self.chat, messages=[*kept, ChatMessage("user", text, attachments=attachments)])
        return shadow.prompt(keep_reasoning)

    def keep_draft(self, text: str) -> None:
        """Keeps what the message box holds, unsent, for the next launch (a saved chat's; best effort, at quit)."""
        if self.store is not None and self.chat.id is not None and text != self.chat.draft:
            with contextlib.suppress(StoreWriteError):
                self.store.save_draft(self.chat.id, text)
                self.chat.draft = text

    def take_back(self) -> ChatMessage:
        """Removes the message just sent (the engine refused it, or it left the queue), and a title it gave; returns
        it."""
        refused = self.chat.messages.pop()
        if not self.chat.messages and self.chat.title == title_from(refused.text):
            self.chat.title = ""  # the title came from the message taken back
        self.chat.touch()
        if not self.chat.messages and self.chat.id is not None and self.store is not None:
            # Nothing of it is left: no empty chat stays in the chat list ("0 messages"); its next message
            # saves it anew.
            with contextlib.suppress(StoreWriteError):
                self.store.delete(self.chat.id)
                self.chat.id = None
                return refused
        self.save()
        return refused

    def drop_last_reply(self) -> None:
        """Before writing the last reply again: it goes (an error or nothing may have taken its place)."""
        if self.chat.messages and self.chat.messages[-1].role == "assistant":
            self.chat.messages.pop()
            self.chat.touch()
            self.save()
        self.cancel_edit()

    @property
    def user_messages(self) -> list[int]:
        """The indexes of the user's messages in the chat, first to last."""
        return [i for i, message in enumerate(self.chat.messages) if message.role == "user"]

    def prompts(self) -> list[str]:
        """What the user wrote, first to last (↑ in the input recalls them)."""
        return [m.text for m in self.chat.messages if m.role == "user"]

    def last_reply(self) -> ChatMessage | None:
        return next((m for m in reversed(self.chat.messages) if m.role == "assistant"), None)

    def apply_settings(self, system_prompt: str, sampling: SamplingParams, tools_off: list[str],
                       tools_on: list[str]) -> None:
        """A new system prompt, sampling and tools (those off and on against their servers'), used from the chat's
        next turn."""
        self.chat.system_prompt, self.chat.sampling = system_prompt, sampling
        self.chat.tools_off, self.chat.tools_on = tools_off, tools_on
        self.chat.touch()
        self.save()


def timings_line(message: ChatMessage) -> str | None:
    """A reply's timings as one line (llama-server's `timings`), or None for a reply saved without them."""
    if message.role != "assistant" or message.prompt_tokens is None or message.ttft_ms is None:
        return None
    parts = [f"prompt {message.prompt_tokens:,} tokens"]
    if message.cached_tokens:
        parts.append(f"{message.cached_tokens:,} from cache ({message.cached_from or 'slot'})")
    parts.append(f"first token {message.ttft_ms / 1000:.2f} s")
    if message.generated_tokens:
        speed = f" at {message.decode_tok_s:.1f} tok/s" if message.decode_tok_s else ""
        parts.append(f"{message.generated_tokens:,} tokens{speed}")
    if message.drafted_tokens:
        accepted = message.accepted_tokens or 0
        parts.append(f"drafted {message.drafted_tokens:,} · accepted {accepted:,} "
                     f"({100 * accepted / message.drafted_tokens:.0f}%)")
    if message.model:
        parts.append(message.model)
    return " · ".join(parts)


def end_note(reason: str | None, text: str, max_tokens: int, error: str | None = None,
             reasoned: bool = False) -> tuple[str, str] | None:
    """The line shown under a finished reply, and its style, or None for a reply that simply ended (`reasoned`:
    whether it has reasoning, which is something written)."""
    if reason is None:
        return "(interrupted: mlxchat stopped before this reply ended)", ""
    if reason == "cancelled":
        return "(stopped)", ""
    if reason == "context":
        return (
            "(the reply reached the end of its slot's context: "
            "start a new chat or use fewer slots for longer conversations)",
            "",
        )
    if reason == "length":
        return f"(the reply reached max_tokens = {max_tokens})", ""
    if reason == "error":
        return f"Error: {error or 'the engine failed'} · the message is kept: regenerate to try again", "-error"
    if not text and reasoned:
        return "(the model ended its reply after its reasoning, with no answer)", ""
    if not text:
        return "(the model ended its reply without writing anything)", ""
    return None


def lost_note(stats: RequestStats) -> str:
    """Why the first token of a returning chat took longer: its parked KV was not kept, so its history went
    through the model again."""
    return (
        f"(first token after {stats.ttft_s:.1f} s: the chat's history was prefilled again, "
        f"{stats.prefilled_tokens} tokens, because {stats.lost})"
    )

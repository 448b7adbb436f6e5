"""The code blocks of a chat's replies, as the reply's Markdown defines them (fenced or indented)."""

from __future__ import annotations

from dataclasses import dataclass

from markdown_it import MarkdownIt

from mlxchat.app.chats.chat import Chat


@dataclass(frozen=True)
class CodeBlock:
    """One block of code: its text, its language tag and which reply holds it."""

    code: str
    language: str
    reply: int  # which reply of the chat holds it, from 1

    @property
    def lines(self) -> int:
        return len(self.code.splitlines())

    def describe(self) -> str:
        """The block in a few words, for a toast or a list: language and size."""
        lines = f"{self.lines} line{'s' if self.lines != 1 else ''}"
        return f"{self.language} block, {lines}" if self.language else f"code block, {lines}"


def code_blocks(markdown: str, reply: int = 1) -> list[CodeBlock]:
    """The code blocks of one reply's Markdown, in order."""
    # The parser Textual's Markdown widget uses: a block copied is the block shown.
    tokens = MarkdownIt("gfm-like").parse(markdown)
    return [
        # Without the last newline: pasted into a shell, the block must not run before it is read.
        CodeBlock(token.content.removesuffix("\n"), token.info.split()[0] if token.info.strip() else "", reply)
        for token in tokens if token.type in ("fence", "code_block")
    ]


def chat_code_blocks(chat: Chat) -> list[CodeBlock]:
    """The code blocks of every reply of `chat`, oldest first."""
    replies = [m.text for m in chat.messages if m.role == "assistant"]
    return [block for number, text in enumerate(replies, 1) for block in code_blocks(text, number)]

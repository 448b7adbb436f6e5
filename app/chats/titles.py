"""Chat titles as tabs show them: short, but keeping the marks that tell a branch from its parent."""

from __future__ import annotations

import re

from mlxchat.app.chats.fork import BEFORE_EDIT_SUFFIX, FORK_SUFFIX

# The marks that tell a branch from its parent: a shortened title keeps them.
BRANCH_MARKS = re.compile(f"((?:{re.escape(FORK_SUFFIX)}|{re.escape(BEFORE_EDIT_SUFFIX)})+)$")
MIN_HEAD_CHARS = 8


def short_title(title: str, chars: int) -> str:
    """`title` cut to about `chars` characters, keeping its branch marks ("… (fork)")."""
    if len(title) <= chars:
        return title
    match = BRANCH_MARKS.search(title)
    marks = match.group(1) if match else ""
    head, room = title[: len(title) - len(marks)], max(chars - len(marks), MIN_HEAD_CHARS)
    return (head if len(head) <= room else head[: room - 1].rstrip() + "…") + marks

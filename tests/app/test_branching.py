"""Fork points and fan-out labels: what a branch keeps and what each variant is called."""

from __future__ import annotations

import dataclasses

from mlxchat.app.chats.fan_out import Variant, default_variants, labels
from mlxchat.app.chats.fork import fork, fork_point
from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.titles import short_title
from mlxchat.engine.events import SamplingParams


def a_chat() -> Chat:
    chat = Chat(7, title="Lighthouse", model="m", system_prompt="Be brief.", sampling=SamplingParams(0.5, seed=3))
    for role, text in (("user", "Hi"), ("assistant", "Hello"), ("user", "Why?"), ("assistant", "Because")):
        chat.add(role, text)  # type: ignore[arg-type]
    return chat


def test_a_fork_at_a_reply_keeps_it_and_at_a_user_message_stops_before_it() -> None:
    chat = a_chat()
    assert fork_point(chat, 3) == (4, "")
    assert fork_point(chat, 1) == (2, "")
    assert fork_point(chat, 2) == (2, "Why?")
    assert fork_point(chat, 0) == (0, "Hi")


def test_a_fork_renders_the_same_history_as_its_parent() -> None:
    chat = a_chat()
    branch = fork(chat, 2)
    assert branch.id is None and branch.title == "Lighthouse (fork)"
    assert (branch.system_prompt, branch.sampling, branch.model) == (chat.system_prompt, chat.sampling, chat.model)
    assert branch.prompt() == chat.prompt()[:3]  # the system prompt and the first two turns
    assert not any(m.saved for m in branch.messages)
    branch.messages[0].text = "changed"
    assert chat.messages[0].text == "Hi"  # copies, not the parent's own turns


def test_variants_are_labelled_with_what_differs() -> None:
    base = SamplingParams(0.7, seed=None)
    assert labels(default_variants("", base)) == ["T=0.2", "T=0.7", "T=1.2"]
    seeds = [Variant("", dataclasses.replace(base, seed=s)) for s in (7, None)]
    assert labels(seeds) == ["seed 7", "no seed"]
    mixed = [Variant("Answer tersely, in one line.", base), Variant("", dataclasses.replace(base, temperature=1))]
    assert labels(mixed) == ["T=0.7 · sys: Answer ters…", "T=1 · sys: none"]
    assert labels([Variant("", base)] * 2) == ["variant 1", "variant 2"]


def test_a_short_title_keeps_the_marks_of_a_branch() -> None:
    assert short_title("Name three uses for a paperclip. (fork)", 20) == "Name three u… (fork)"
    assert short_title("Name three uses for a paperclip.", 20) == "Name three uses for…"
    assert short_title("Paperclips (fork) (before edit)", 20) == "Papercl… (fork) (before edit)"
    assert short_title("Short (fork)", 20) == "Short (fork)"

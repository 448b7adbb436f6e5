"""Exporting saved chats: Markdown and JSON, `mlxchat chats` and `mlxchat export` on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxchat.app.chats.export import to_json, to_markdown
from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.cli import main
from mlxchat.engine.events import SamplingParams
from tests.app.test_cli import mlxchat
from tests.markers import needs_console_script


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An XDG_DATA_HOME of this test's own."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "data"


def saved_chat(data_home: Path) -> Chat:
    """A chat of two turns, the first reply reasoned, the second stopped, saved in `data_home`'s database and
    read back from it."""
    store, _ = ChatStore.open_for_app(data_home / "mlxchat" / "chats.db")
    chat = Chat(None, model="SmolLM2", system_prompt="You are terse.",
                sampling=SamplingParams(temperature=0.5, top_p=0.9, top_k=10, max_tokens=100, seed=3, thinking=False,
                                        reasoning_budget=256))
    chat.add("user", "What is **MLX**?")
    first = chat.add("assistant", "An array framework for Apple silicon.")
    first.finish_reason, first.reasoning, first.reasoning_tokens, first.reasoning_ms = (
        "stop", "The user asks about *MLX*.", 7, 1234.5)
    chat.add("user", "Über Metal?")
    reply = chat.add("assistant", "Yes, it runs on Metal")
    reply.finish_reason, reply.prompt_tokens, reply.generated_tokens = "cancelled", 40, 6
    reply.cached_tokens, reply.cached_from, reply.ttft_ms, reply.decode_tok_s = 31, "slot", 42.5, 17.0
    store.save(chat)
    reopened = store.load(chat.id)  # type: ignore[arg-type]
    store.close()
    assert reopened is not None
    return reopened


def test_markdown_has_the_title_settings_and_every_turn(data_home: Path) -> None:
    chat = saved_chat(data_home)
    text = to_markdown(chat)
    assert text.startswith("# What is **MLX**?\n")
    assert f"- chat {chat.id} · model SmolLM2" in text
    settings = ("temperature 0.5 · top_p 0.9 · top_k 10 · max_tokens 100 · seed 3 · thinking off"
                " · reasoning_budget 256")
    assert settings in text
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == ["## System", "## User", "## Assistant", "## User", "## Assistant"]
    assert text.index("Über Metal?") < text.index("Yes, it runs on Metal") < text.index("*(stopped)*")
    assert text.count("*(") == 1  # a reply that simply ended gets no line
    # The reasoning, folded in a <details> block above its answer; the other reply has none.
    details = "<details>\n<summary>Thought for 1.2 s · 7 tokens</summary>\n\nThe user asks about *MLX*.\n\n</details>"
    assert text.count("<details>") == 1
    assert text.index("What is **MLX**?") < text.index(details) < text.index("An array framework")


def test_json_holds_the_messages_with_their_counts(data_home: Path) -> None:
    chat = saved_chat(data_home)
    document = json.loads(to_json(chat))
    assert (document["format"], document["version"], document["id"]) == ("mlxchat-chat", 1, chat.id)
    assert document["sampling"] == {"temperature": 0.5, "top_p": 0.9, "top_k": 10, "max_tokens": 100, "seed": 3,
                                    "thinking": False, "reasoning_budget": 256, "speculative": "off"}
    assert [(m["role"], m["content"]) for m in document["messages"]] == [
        (m.role, m.text) for m in chat.messages]
    last = document["messages"][-1]
    assert (last["finish_reason"], last["prompt_tokens"], last["generated_tokens"]) == ("cancelled", 40, 6)
    # Each reply's timings, as llama-server's: cache hits and where from, time to first token, speed.
    assert (last["cached_tokens"], last["cached_from"], last["ttft_ms"], last["decode_tok_s"]) == (31, "slot", 42.5, 17.0)
    assert (last["drafted_tokens"], last["accepted_tokens"]) == (None, None)  # (no drafts: speculative "off")
    assert "Über" in to_json(chat)  # kept readable, not \\u-escaped
    # Reasoning in fields of its own, never in the content.
    first = document["messages"][1]
    reasoning = (first["reasoning"], first["reasoning_tokens"], first["reasoning_ms"])
    assert reasoning == ("The user asks about *MLX*.", 7, 1234.5)
    assert "MLX*." not in first["content"]
    assert (last["reasoning"], last["reasoning_tokens"]) == ("", None)


@needs_console_script
def test_export_console_script_prints_markdown_and_json(data_home: Path) -> None:
    chat = saved_chat(data_home)
    env = {"XDG_DATA_HOME": str(data_home)}
    done = mlxchat("export", str(chat.id), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == to_markdown(chat)
    done = mlxchat("export", str(chat.id), "--format", "json", env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["title"] == "What is **MLX**?"


def test_chats_lists_ids_and_searches(data_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chat = saved_chat(data_home)
    other = saved_chat(data_home)
    assert main(["chats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [int(line.split()[0]) for line in lines] == [other.id, chat.id]
    assert "4 messages" in lines[0] and lines[0].endswith("What is **MLX**?")
    assert main(["chats", "--search", "metal"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["chats", "--search", "no such words"]) == 0
    assert capsys.readouterr().out == ""


@needs_console_script
def test_export_of_a_missing_chat_exits_2_with_a_message(data_home: Path) -> None:
    saved_chat(data_home)
    done = mlxchat("export", "999", env={"XDG_DATA_HOME": str(data_home)})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "mlxchat: there is no chat 999 (`mlxchat chats` lists the saved ones)"
    done = mlxchat("export", "abc", env={"XDG_DATA_HOME": str(data_home)})
    assert done.returncode == 2 and "invalid int value: 'abc'" in done.stderr
    assert "Traceback" not in done.stderr


def test_export_with_no_database_says_so(data_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "1"]) == 1
    err = capsys.readouterr().err
    assert "no chats have been saved yet" in err and str(data_home / "mlxchat" / "chats.db") in err
    assert not (data_home / "mlxchat" / "chats.db").exists()  # reading creates nothing

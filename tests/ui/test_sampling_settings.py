"""The [sampling] table as a user sets it in the config, reaching each new chat's replies: top_k and top_p narrow a hot
reply down to the greedy one (mlx-lm's own greedy reply is the reference), a seed makes two chats' hot replies the
same, thinking off and a reasoning budget shape a reasoning model's reply."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from mlxchat.app.chats.chat import ChatMessage
from mlxchat.app.ui.app import ChatApp
from tests.pilot import make_app, open_second_chat, ready, run, send, wait_for
from tests.tiny_reasoning import ANSWER, REASONING

QUESTION = "Tell me about the sea."
N = 12


@functools.cache
def mlx_lm_greedy(model: Path) -> str:
    """mlx-lm alone, greedy (its default sampler), on QUESTION as the model's chat template writes it."""
    from mlx_lm import generate, load

    loaded, tokenizer = load(str(model))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True)
    return generate(loaded, tokenizer, prompt, max_tokens=N)


def replies(model: Path, chats: int, **sampling: Any) -> list[ChatMessage]:
    """Each of `chats` new chats' reply to QUESTION, the config's [sampling] being `sampling` (float32 K/V: the
    reference's), in an app of its own with no saved chats (a chat reopened would keep its own settings)."""
    data = Path(os.environ["XDG_DATA_HOME"])  # (the test's own, restored after it)
    data.mkdir(parents=True, exist_ok=True)
    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(dir=data)
    got: list[ChatMessage] = []

    async def scenario(app: ChatApp, pilot: Pilot) -> None:
        panes = list(await open_second_chat(app, pilot)) if chats == 2 else [await ready(app, pilot)]
        for pane in panes:
            await send(pilot, pane, QUESTION)
            await wait_for(pilot, lambda pane=pane: not pane.busy, "the reply")
            got.append(pane.chat.messages[-1])

    run(make_app(model, kv_dtype="float32", sampling={"max_tokens": N, **sampling}), scenario)
    return got


@pytest.mark.parametrize("narrowing", [{"top_k": 1}, {"top_k": 0, "top_p": 1e-9}], ids=["top_k", "top_p"])
def test_top_k_or_top_p_narrow_a_hot_reply_to_the_greedy_one(tiny_model_dir: Path, narrowing: dict) -> None:
    # (Left at their defaults, the same temperature and seed draw another reply: the next test.)
    (narrowed,) = replies(tiny_model_dir, 1, temperature=1.5, seed=42, **narrowing)
    assert narrowed.text.strip() == mlx_lm_greedy(tiny_model_dir).strip()


def test_a_seed_gives_two_chats_the_same_hot_reply(tiny_model_dir: Path) -> None:
    first, second = (m.text for m in replies(tiny_model_dir, 2, temperature=1.5, seed=42))
    assert first == second and first.strip() != mlx_lm_greedy(tiny_model_dir).strip()
    unseeded = [m.text for m in replies(tiny_model_dir, 2, temperature=1.5)]
    assert unseeded[0] != unseeded[1]  # (no seed: each reply draws its own)


def test_thinking_off_or_a_reasoning_budget_in_the_config_shape_a_reasoning_reply(reasoning_model) -> None:
    model = reasoning_model("switch")
    (reply,) = replies(model, 1, temperature=0, thinking=False)
    assert (reply.reasoning, reply.text.strip()) == ("", ANSWER.strip())
    # A budget of 2: the reasoning ends after two tokens, and the answer follows.
    (reply,) = replies(model, 1, temperature=0, reasoning_budget=2)
    assert REASONING.startswith("Several chats")
    assert (reply.reasoning, reply.reasoning_tokens, reply.text) == ("Several chats", 2, ANSWER)

"""A draft model (draft_model, speculative = "draft") changes no token: the tiny target's replies with drafts from a
tiny draft of it (tests/tiny_draft.py: its tokenizer, its weights a little off) equal the replies without, greedy
and seeded, in busy slots; a draft with another vocabulary, or with layers that cannot give back rejected drafts, is
refused at start, saying what to change."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from mlxchat.app.cli import main
from mlxchat.app.config.loading import load_settings
from mlxchat.app.config.settings import ConfigError
from mlxchat.app.session.start import StartFailure, start_engine
from mlxchat.engine.loading.models import LoadOptions, load_model
from mlxchat.engine.scheduler import SlotScheduler
from mlxchat.engine.speculation.draft_load import load_draft
from tests.engine.test_families import alone, plan
from tests.engine.test_speculation import GREEDY, PROMPTS, SEEDED, answered
from tests.tiny_draft import build_draft
from tests.tiny_model import build_tiny_model

# How far the draft's weights are off the target's: its greedy next token is the target's at about a fifth of the
# positions of PROMPTS' replies, so that drafts are both taken and refused.
NOISE = 0.03


@pytest.fixture(scope="module")
def draft_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_draft(tiny_model_dir, tmp_path_factory.mktemp("draft") / "tiny-draft", layers=2, noise=NOISE)


def loaded_pair(target_dir: Path, draft_dir: Path):
    """The target and the draft model loaded as the app loads them (engine.startup: load_model, then the draft's)."""
    target = load_model(str(target_dir))
    draft, _ = load_draft(str(draft_dir), target, LoadOptions(), lambda _: None)
    return target, draft


def drafted_replies(target, draft, sampling, core: SlotScheduler | None = None) -> tuple[list, list]:
    """PROMPTS answered at once in three slots with speculative = "draft", every draft the model makes checked (rows
    and the draft's pass taken as free, so that the cost rule never stops it)."""
    core = core or SlotScheduler(target.ready, plan(), prefill_chunk=4, draft=draft)
    core.verifier.row_cost, core.verifier.draft_cost = 0.0, 0.0
    return answered(core, PROMPTS, dataclasses.replace(sampling, speculative="draft"))


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_replies_with_a_draft_model_equal_replies_without_in_busy_slots(tiny_model_dir, draft_dir, sampling) -> None:
    target, draft = loaded_pair(tiny_model_dir, draft_dir)
    plain, _ = answered(SlotScheduler(target.ready, plan(), prefill_chunk=4), PROMPTS, sampling)
    drafted, stats = drafted_replies(target, draft, sampling)
    assert drafted == plain
    if sampling is GREEDY:
        assert plain == [alone(target.model, p, GREEDY.max_tokens)[:-1] for p in PROMPTS]
    taken = sum(s.accepted_tokens for s in stats)
    assert 0 < taken < sum(s.drafted_tokens for s in stats)  # (drafts taken and drafts refused, rolled back)


def test_a_draft_of_the_target_itself_has_every_greedy_draft_taken(tiny_model_dir, tmp_path) -> None:
    """The target's own weights as the draft: each of its drafts is the target's choice, as far as its K/V is the
    target's; so it is caught up with each slot's prompt and rolled back after each check exactly."""
    target, draft = loaded_pair(tiny_model_dir, build_draft(tiny_model_dir, tmp_path / "same", layers=2))
    core = SlotScheduler(target.ready, plan(), prefill_chunk=4, draft=draft)
    first, stats = drafted_replies(target, draft, GREEDY, core)
    assert all(s.drafted_tokens > GREEDY.max_tokens / 2 for s in stats)
    assert [s.accepted_tokens for s in stats] == [s.drafted_tokens for s in stats]
    # The same prompts again: the slots and the draft's K/V hold them and the replies already (each slot reads its
    # prompt's last token again, the draft its first reply token), and the replies come the same.
    again, stats = drafted_replies(target, draft, GREEDY, core)
    assert again == first and [s.accepted_tokens for s in stats] == [s.drafted_tokens for s in stats]


def test_the_app_starts_with_a_draft_model_and_says_what_it_drafts(tiny_model_dir, draft_dir) -> None:
    """Started as the app starts (settings -> start_engine): a chat with speculative = "draft" gets the reply it gets
    with "off", and the engine's report (F3) names the draft model and how much of its drafts were taken. A draft as
    large as the target (this one) costs more than it saves, and the cost rule runs it only once told it is free."""
    started = start_engine(load_settings(None, {"model": str(tiny_model_dir), "draft_model": str(draft_dir),
                                                "ctx_size": 2048}), lambda _: None)
    engine = started.engine
    try:
        done = {}
        for way in ("off", "costly", "draft"):
            if way == "draft":
                engine.call(lambda: setattr(engine.core.verifier, "draft_cost", 0.0)).result(10)
            engine.clear(0, park=False)
            done[way] = engine.submit(0, tokens=PROMPTS[2], sampling=dataclasses.replace(
                GREEDY, max_tokens=64, speculative="off" if way == "off" else "draft")).result(60)
        assert done["costly"].text == done["draft"].text == done["off"].text
        assert done["costly"].stats.drafted_tokens == 0 < done["draft"].stats.drafted_tokens
        note = engine.snapshot().speculation
        stats = done["draft"].stats
        assert (f'draft model tiny-draft drafts for chats with speculative = "draft": {stats.accepted_tokens} of '
                f"{stats.drafted_tokens} drafted tokens taken") in note
    finally:
        engine.shutdown()


def test_a_draft_model_with_another_vocabulary_is_refused_at_start(tiny_model_dir, tmp_path, capsys) -> None:
    other = build_tiny_model(tmp_path / "other-vocab", vocab_size=320)
    settings = load_settings(None, {"model": str(tiny_model_dir), "draft_model": str(other)})
    with pytest.raises(StartFailure) as refused:
        start_engine(settings, lambda _: None)
    problem = refused.value.problem
    assert problem.startswith("The draft model other-vocab does not share tiny-llama's vocabulary (320 tokens against "
                              "the target's 384; '")
    # The first tokens that differ, each with its id on both sides (the draft's smaller vocabulary lacks them).
    assert re.search(r"384; '[^']+': id \d+ in the target, absent in the draft; ", problem), problem
    assert "its tokens would mean other words. To draft, set draft_model to a model with the target's tokenizer" in problem
    assert refused.value.remedy.startswith("Set `draft_model` in the config file") and refused.value.status == 2
    config = tmp_path / "config.toml"
    config.write_text(f'draft_model = "{other}"\n')
    assert main(["doctor", "--model", str(tiny_model_dir), "--config", str(config)]) == 1
    assert "ERROR: The draft model other-vocab does not share" in capsys.readouterr().out


def test_a_draft_model_with_recurrent_layers_is_refused_at_start(tiny_model_dir, tmp_path) -> None:
    """Its tokenizer is the target's (tests/tiny_families.py), so the vocabulary passes: its recurrent state cannot
    give back the K/V of drafts the target did not take."""
    from tests.tiny_families import save_family

    recurrent = save_family("mamba2", tmp_path / "recurrent")
    settings = load_settings(None, {"model": str(tiny_model_dir), "draft_model": str(recurrent)})
    with pytest.raises(StartFailure) as refused:
        start_engine(settings, lambda _: None)
    assert refused.value.problem.startswith("The draft model recurrent has recurrent layers, whose state cannot give "
                                            "back the drafts tiny-llama did not take. To draft, ")
    assert refused.value.remedy.startswith("Set `draft_model` in the config file") and refused.value.status == 2


def test_doctor_says_what_the_draft_model_holds_and_counts_it_in_the_kv_and_memory(tiny_model_dir, draft_dir,
                                                                                     tmp_path, capsys) -> None:
    import mlx.core as mx

    config = tmp_path / "config.toml"
    config.write_text(f'draft_model = "{draft_dir}"\nctx_size = 2048\nparallel = 2\nkv_dtype = "float16"\n')
    assert main(["doctor", "--model", str(tiny_model_dir), "--config", str(config)]) == 0
    said = {line[:14].strip(): line[14:] for line in capsys.readouterr().out.splitlines()}
    # Its K/V: 2 slots x 1,024 tokens x 2 layers x K and V x 2 heads x 16 values x 2 bytes; the target's as much.
    kv = 2 * 1024 * 2 * 2 * 2 * 16 * 2
    assert "tiny-draft, float32" in said["draft"] and "512.0 KiB of K/V for the slots" in said["draft"]
    assert "% of a sample text" in said["draft"]
    assert said["KV cache"] == "1.0 MiB (512.0 KiB per slot) · float16, 256 B a token · the draft model's 512.0 KiB included"
    # The memory need: both models' weights (float32, as their files hold them) and K/V, and 15% of working memory.
    weights = sum(v.nbytes for d in (tiny_model_dir, draft_dir) for v in mx.load(str(d / "model.safetensors")).values())
    assert said["memory"].endswith(f"; weights + KV + working memory need {int((weights + 2 * kv) * 1.15) / 2**20:.1f} MiB")


def test_a_draft_trained_on_fewer_tokens_than_a_slot_is_said_and_draft_without_a_draft_model_refused(
        tiny_model_dir, tmp_path) -> None:
    import json

    short = build_draft(tiny_model_dir, tmp_path / "short", layers=1)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 256}))
    started = start_engine(load_settings(None, {"model": str(tiny_model_dir), "draft_model": str(short),
                                                "ctx_size": 1024, "parallel": 2}), lambda _: None)
    started.engine.shutdown()
    assert ("The draft model short was trained on 256 tokens, fewer than a slot's 512: past them its drafts are "
            "rarely taken (replies stay the same)") in started.warnings
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {"sampling": {"speculative": "draft"}})
    assert str(refused.value) == ('sampling.speculative = "draft" (--sampling.speculative) and no draft_model is set: '
                                  'set draft_model to a smaller model with the same tokenizer, or speculative to "lookup"')

"""Saved KV on disk: a chat reopened after a restart reads its KV back, exactly; damaged files are
ignored and removed with a note; the tier stays within its budget; its files are private."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlxchat.engine.events import SamplingParams
from mlxchat.engine.kv.disk import DiskTier
from tests.engine.test_families import NEW, alone, generated
from tests.engine.test_parking import CHAT_A, CHAT_B, engines, start, stored, tokenizer, turn2  # noqa: F401
from tests.tiny_families import build_family

GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)
KEY = "tiny model, seed 0"


def files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.safetensors"))


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "mamba2"])
def test_a_chat_reopened_after_a_restart_reads_its_kv_from_disk(family, tokenizer, engines, tmp_path):
    first = start(engines, build_family(family), tokenizer, disk=DiskTier(tmp_path, 2**30, KEY))
    first.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    first.shutdown()  # what quitting does: every slot's KV is written, and waited for
    assert len(files(tmp_path)) == 1

    model = build_family(family)  # the app's next launch: a fresh model
    again = turn2(model, CHAT_A)
    second = start(engines, model, tokenizer, disk=DiskTier(tmp_path, 2**30, KEY))
    done = second.submit(0, tokens=again, sampling=GREEDY).result(60)
    assert done.stats.restored_from == "disk" and done.stats.cached_from == "disk"
    assert done.stats.cached_tokens == stored(CHAT_A)
    assert done.stats.prefilled_tokens == len(again) - stored(CHAT_A)
    assert generated(second, 0, again) == alone(model, again)[:-1]


def test_damaged_or_foreign_files_are_ignored_removed_and_said(tokenizer, engines, tmp_path):
    engine = start(engines, build_family("llama"), tokenizer, parallel=2, disk=DiskTier(tmp_path, 2**30, KEY))
    engine.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    engine.submit(1, tokens=CHAT_B, sampling=GREEDY).result(60)
    engine.shutdown()
    saved = DiskTier(tmp_path, 2**30, KEY).entries.values()
    a = next(e.path for e in saved if e.tokens[: len(CHAT_A)] == CHAT_A)  # chat A's file
    (b,) = [f for f in files(tmp_path) if f != a]
    a.write_bytes(a.read_bytes()[:-100])  # truncated: a crash in the middle of a write
    (a.parent / "junk.safetensors").write_bytes(b"not a tensor file")
    # A file of another model, in this model's folder.
    other = DiskTier(tmp_path, 2**30, "another model")
    other.write([1, 2, 3], [None])
    other.close(5)
    (other_file,) = other.folder.glob("*.safetensors")
    os.replace(other_file, a.parent / other_file.name)

    tier = DiskTier(tmp_path, 2**30, KEY)
    assert len(tier.entries) == 1 and files(tmp_path) == [b]
    notes = " | ".join(tier.notes)
    assert notes.count("ignored and removed") == 3
    assert "truncated" in notes and "another model" in notes
    model = build_family("llama")
    reopened = start(engines, model, tokenizer, disk=tier)
    done = reopened.submit(0, tokens=turn2(model, CHAT_A), sampling=GREEDY).result(60)
    assert done.stats.cached_tokens == 0 and done.error is None  # prefilled afresh, never from the bad file
    assert reopened.snapshot().disk_notes[:3] == tuple(tier.notes[:3])


def test_the_tier_stays_within_its_budget_least_recently_used_first(tokenizer, engines, tmp_path):
    model = build_family("llama")
    probe = start(engines, model, tokenizer, disk=DiskTier(tmp_path / "probe", 2**30, KEY))
    probe.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    probe.shutdown()
    (one,) = files(tmp_path / "probe")
    budget = int(2.5 * one.stat().st_size)  # room for two chats of this size, not three
    engine = start(engines, model, tokenizer, disk=DiskTier(tmp_path / "tier", budget, KEY))
    chats = [[t + k for t in CHAT_A] for k in range(3)]
    for chat in chats:  # each turn takes the slot from the one before: it is parked, so written
        engine.submit(0, tokens=chat, sampling=GREEDY).result(60)
    engine.shutdown()
    kept = files(tmp_path / "tier")
    assert len(kept) == 2 and sum(f.stat().st_size for f in kept) <= budget
    tier = DiskTier(tmp_path / "tier", budget, KEY)
    assert sorted(len(e.tokens) for e in tier.entries.values()) == [stored(CHAT_A)] * 2
    assert tier.best(chats[0], 1000)[1] < len(CHAT_A)  # the oldest went
    assert tier.best(chats[2], 1000)[1] == len(chats[2])  # the newest stayed


def test_saved_kv_is_private_and_off_at_zero(tokenizer, engines, tmp_path):
    engine = start(engines, build_family("llama"), tokenizer, disk=DiskTier(tmp_path, 2**30, KEY))
    engine.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    engine.shutdown()
    (saved,) = files(tmp_path)
    assert saved.stat().st_mode & 0o777 == 0o600
    assert saved.parent.stat().st_mode & 0o777 == 0o700 and tmp_path.stat().st_mode & 0o777 == 0o700
    off = start(engines, build_family("llama"), tokenizer, disk=DiskTier(tmp_path / "off", 0, KEY))
    off.submit(0, tokens=CHAT_A, sampling=GREEDY).result(60)
    off.shutdown()
    assert not (tmp_path / "off").exists()


def test_a_chat_that_moved_on_replaces_its_older_file(tmp_path):
    import mlx.core as mx

    tier = DiskTier(tmp_path, 2**30, KEY)
    state = [(mx.zeros((1, 1, 4, 2)), mx.zeros((1, 1, 4, 2)))]
    history = list(range(1, 101))
    tier.write(history, state)
    tier.write(list(range(500, 800)), state)  # another chat, sharing nothing: it stays
    moved_on = history[:95] + [7] * 40  # the same chat later: its last reply tokenized otherwise
    tier.write(moved_on, state)
    tier.close(5)
    kept = DiskTier(tmp_path, 2**30, KEY).entries.values()
    assert sorted(len(e.tokens) for e in kept) == [135, 300]

"""mlx-lm's own speculative decoding as the speculative bench's peer (engine.bench.mlx_lm_speculative): on the tiny
model with a draft of the same weights, the draft's tokens are the model's own, so mlx-lm takes every one it drafts."""

from __future__ import annotations

from pathlib import Path

from mlxchat.engine.bench.mlx_lm_speculative import NUM_DRAFT, format_peer_table, run_mlx_lm_speculative
from mlxchat.engine.loading.models import load_model
from tests.tiny_draft import build_draft


def test_mlx_lm_drafts_with_the_draft_model_and_says_how_many_tokens_came_from_it(tiny_model_dir: Path,
                                                                                  tmp_path: Path) -> None:
    target = load_model(str(tiny_model_dir))
    same = load_model(str(build_draft(tiny_model_dir, tmp_path / "same", layers=2)))
    records = run_mlx_lm_speculative(target, same, rounds=1)
    assert [r.workload for r in records] == ["edit task, greedy", "edit task, seeded", "plain prompts"]
    greedy = records[0]
    # Each check takes the NUM_DRAFT drafted tokens (the draft is the model) and adds the model's next: NUM_DRAFT of
    # every NUM_DRAFT + 1 tokens come from the draft, but for the first token (the prompt's) and a last short draft.
    assert greedy.tokens > 100 and greedy.tokens - 1 - NUM_DRAFT <= greedy.from_draft * (NUM_DRAFT + 1) / NUM_DRAFT
    assert greedy.from_draft <= greedy.tokens * NUM_DRAFT / (NUM_DRAFT + 1)
    assert all(r.plain_tok_s > 0 and r.draft_tok_s > 0 for r in records)
    table = format_peer_table(records)
    assert "stream_generate with the draft model (3 tokens a draft)" in table and "edit task, greedy" in table

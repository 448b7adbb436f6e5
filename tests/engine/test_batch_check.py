"""The check at load: batched logits against mlx-lm alone decide how a model is batched, or refuse it."""

from __future__ import annotations

import pytest

from mlxchat.engine.loading.batch_check import check_batching
from mlxchat.engine.loading.families import UnsupportedFamily
from tests.tiny_configs import build, tiny_config


def test_a_model_whose_layers_honour_padding_is_batched_padded() -> None:
    check = check_batching(build(tiny_config("llama")))
    assert check.padded_prefill and check.difference < 1e-4


@pytest.mark.parametrize("family", ["mamba", "jamba"])
def test_a_model_whose_state_takes_in_padding_is_prefilled_unpadded(family: str) -> None:
    """Mamba's and Jamba's recurrent layers ignore the cache's lengths: a padded row's state would be wrong."""
    check = check_batching(build(tiny_config(family), scale=2.0))
    assert not check.padded_prefill and check.difference < 1e-4


def test_a_model_that_reads_its_cache_as_one_sequence_is_refused_naming_why() -> None:
    """gpt_bigcode turns the cache's offset into one number for learned positions: slots hold one per row."""
    with pytest.raises(UnsupportedFamily, match="'gpt_bigcode' is not supported.*cannot serve"):
        check_batching(build(tiny_config("gpt_bigcode")))

"""The memory pre-flight check: warn past what is available, refuse past what the machine has."""

from __future__ import annotations

import pytest

from mlxchat.engine.memory import MemoryInfo, check_memory


@pytest.mark.parametrize(
    ("available", "total", "outcome"),
    [(8 * 2**30, 16 * 2**30, "fits"), (2**29, 16 * 2**30, "warning"), (2**29, 2**30, "error")],
)
def test_memory_preflight_warns_past_available_and_refuses_past_total(available, total, outcome) -> None:
    check = check_memory(538 * 2**20, 360 * 2**20, MemoryInfo(total, available))
    assert check.need_bytes == int(898 * 2**20 * 1.15)
    assert (check.warning is not None, check.error is not None) == (outcome == "warning", outcome == "error")
    message = check.warning or check.error or ""
    if outcome != "fits":
        assert "538.0 MiB" in message and "360.0 MiB" in message and "smaller total context" in message

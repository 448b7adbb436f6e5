"""A decode pass in flight, and the inputs of the next one: mostly the tokens it is sampling, left on the device."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from mlxchat.engine.slots import Request, Slot


@dataclass
class DecodePass:
    """A decode pass in flight: which (slot, request) each row serves, and its sampled tokens."""

    rows: list[tuple[Slot, Request]]
    tokens: mx.array


def next_inputs(picks: list[int], previous: DecodePass | None) -> mx.array:
    """The next pass's input tokens (rows,): pick i >= 0 is the previous pass's i-th token (still being computed),
    pick -1 - t the token t itself. The previous pass's tokens feed the next one as they are, in one take, or mixed
    with given tokens by one select: a slice and a stack a row made 2 x rows operations a step (128 at 64 slots)."""
    dtype = previous.tokens.dtype if previous else mx.uint32
    if previous is None or all(p < 0 for p in picks):
        return mx.array([-1 - p for p in picks], dtype=dtype)
    if picks == list(range(previous.tokens.shape[0])):  # every row goes on, in order: each step but the first
        return previous.tokens
    taken = previous.tokens[mx.array([max(p, 0) for p in picks])]
    if all(p >= 0 for p in picks):
        return taken
    given = mx.array([-1 - p if p < 0 else 0 for p in picks], dtype=dtype)
    return mx.where(mx.array([p >= 0 for p in picks]), taken, given)

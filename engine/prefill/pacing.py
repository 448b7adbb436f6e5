"""How much a prompt may slow the slots that stream while it is read: chunks steered by measured step costs.

While other slots stream, a long prompt must not freeze them: a pass that reads prompt tokens is sized so that it
takes at most BURST times the streams' usual step, and the steps after it go without one until the streams' steps
have taken on average at most `stall` times their usual step (the setting prefill_stall). No mlx here: the settings
read its default.
"""

from __future__ import annotations

import time

# While slots stream: their steps may take on average this many times their usual time while a prompt is read (the
# setting prefill_stall). Higher, a long prompt's first token comes sooner and the others slow more. At 1.8 with a chunk
# every step, the long scenario's first token came at 2.41-2.66x its time alone; at 2.2 with BURST, 2.30-2.38x. The
# streams' step then got faster (a decode step's layers as one operation), and with it what the stall lets a chunk
# take: at 2.2 2.66-2.79x, at 2.6 2.36x, at 3.0 2.12x, the streams' gaps p50 1.1x their step and worst 8.8-10.0x in
# each (AVX2, AMD EPYC Zen 4, 2 cores).
STALL = 2.6
# A step that reads a prompt's chunk beside streaming slots may take about this many times their usual step (at least
# the stall; the chunk is sized for it), and the streams' next steps go without a chunk until what it took past the
# stall is paid back: the stall holds on average. Where a pass is bound by arithmetic (a CPU) small chunks cost far more
# a token (beside 3 streams: 8 tokens 4.4 ms each, 32 2.5, 96 2.1, the prompt alone 2.0; AVX2, 2 cores): a chunk of 8
# every step held the streams' gaps at 2.9-3.5x their step (p50, worst 4.3-6.2x); a larger one every few steps, at
# 1.2-1.3x (worst 7.1-7.8x; at 5, first token 2.45-2.52x alone against 2.30-2.38x at 6).
BURST = 6.0
# Fewest prompt tokens a pass reads while slots stream, and how many before the costs are measured.
MIN_CHUNK = 8
FIRST_CHUNK = 32
# Weight of the newest measure in the running average of a decode step.
NEWEST = 0.3
# Most a chunk may grow or shrink from one pass to the next.
STEP_RATIO = 2.0
# Longest the streams' steps keep a vision tower waiting after one of its slices (else a stall near 1 would hold it for
# ever, as MIN_CHUNK keeps a prompt from waiting for ever).
TOWER_WAIT_MAX_S = 1.0


class StepCosts:
    """What the scheduler's steps cost, and the prompt chunk that keeps streaming slots at their pace.

    A pass's cost is far from proportional to its tokens (a pass of 1 token and one of 16 cost about
    the same on a CPU: the weights are read either way) and a prompt token costs more the further
    in it sits, so the chunk is steered by what the last one cost, not predicted from a rate.
    """

    def __init__(self, stall: float = STALL) -> None:
        self.stall = stall
        self.decode_s: float | None = None
        self.streaming_chunk = FIRST_CHUNK
        self.owed_s = 0.0  # what the steps took beyond the stall (chunks), paid back by the streams' steps alone
        self._chunk: tuple[float, int] | None = None  # the last step's chunk: (its time past a decode step, tokens)
        self._tower_at = 0.0  # (time.monotonic) when a vision tower may run its next slice

    def record(self, seconds: float, prompt_tokens: int, decode_rows: int) -> None:
        """One step took `seconds`, reading `prompt_tokens` prompt tokens and decoding `decode_rows` slots."""
        if not decode_rows:
            return
        # The step after a chunk's: where the chunk shares the pipelined decode pass, its pass runs on into this
        # step, whose time past a decode step is the chunk's too (not the streams' usual step).
        tail = prompt_tokens == 0 and self._chunk is not None
        if prompt_tokens == 0 and not tail:
            self.decode_s = seconds if self.decode_s is None else (1 - NEWEST) * self.decode_s + NEWEST * seconds
        if self.decode_s is None:
            return
        # Every step may take the stall's share beyond the streams' own: what a chunk takes past it is owed, and paid
        # back by the steps after it (a credit of one step's share at most, so that the average holds, not more).
        over = seconds - self.decode_s if prompt_tokens or tail else 0.0
        self.owed_s = max(-self._allowed_s(), self.owed_s + over - self._allowed_s())
        if prompt_tokens:
            self._size(over, prompt_tokens)
            self._chunk = (over, prompt_tokens)
        elif self._chunk is not None:
            self._size(self._chunk[0] + over, self._chunk[1])
            self._chunk = None

    def _size(self, over: float, tokens: int) -> None:
        """The next chunk, from what a chunk of `tokens` added to the streams' step, against what BURST lets it."""
        burst = (max(BURST, self.stall) - 1.0) * (self.decode_s or 0.0)
        ratio = min(STEP_RATIO, max(1 / STEP_RATIO, burst / max(over, 1e-6)))
        self.streaming_chunk = max(MIN_CHUNK, round(tokens * ratio))

    def _allowed_s(self) -> float:
        """What a prompt's chunk may add to the streams' step."""
        return (self.stall - 1.0) * (self.decode_s or 0.0)

    def slice_s(self) -> float:
        """Seconds a vision tower may run between two of the streams' steps: what `stall` lets a prompt's chunk add
        to their step (at least one of its layers runs, however long: engine.prefill.tower)."""
        return self._allowed_s()

    def tower_due(self) -> bool:
        """Whether a vision tower may run a slice now. A layer of a tower can take many of the streams' steps (a
        SigLIP-base layer over 1024 patches: 0.4 s on 2 cores, a step 30-80 ms), and cannot be cut: after a slice the
        streams have the steps to themselves until the tower's share of the time is what `stall` gives a prompt."""
        return time.monotonic() >= self._tower_at

    def tower_ran(self, seconds: float) -> None:
        """A slice of a vision tower took `seconds`."""
        wait = seconds / (self.stall - 1.0) if self.stall > 1.0 else TOWER_WAIT_MAX_S
        self._tower_at = time.monotonic() + min(wait, TOWER_WAIT_MAX_S)

    def chunk(self, most: int) -> int:
        """Prompt tokens a pass may read while slots stream, so that their step stays within `stall` times its usual
        time (on average: none while the streams are owed steps of their own)."""
        return 0 if self.owed_s > 0 else min(most, self.streaming_chunk)

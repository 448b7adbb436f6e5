"""How much of a draft the model took, and how many tokens a reply drafts in the next pass: as many as are each likely
enough to be taken to pay for the row they add, given how many slots share the pass; none for a while after drafts
the model did not take at all."""

from __future__ import annotations

from mlxchat.engine.speculation.lookup import NgramLookup

MOST_DRAFTED = 16  # the longest draft
# What one more row costs a pass, against what the pass costs whatever its rows (reading the weights, the step's
# own work): SmolLM2-135M as the app holds it, 1,000 tokens of context, CPU time of a pass of 1 to 12 rows of one slot
# 22.9, 28.4, 32.0, 36.7, 47.0 (6), 56.1 (8), 79.8 ms (12); 8 slots of 1 to 4 rows 59.6, 114.7, 158.4, 196.6 ms
# (2 cores of an AMD EPYC, a shared machine: CPU time, best of 15).
ROW_COST = 0.3
# The chance that a drafted token is taken (given those before it were) a reply starts with, as taken of tried.
FIRST_TAKEN, FIRST_TRIED = 2.0, 3.0
KEEP = 0.8  # how much of the counts so far each checked draft keeps (the rest is the new draft's)
# After this many drafts in a row whose first token was wrong, the reply stops drafting for twice as many tokens
# each time (up to PAUSE_MOST): a reply that does not repeat its context then decodes as it would without drafts.
MISSES_BEFORE_PAUSE = 2
PAUSE_MOST = 256


def accepted(drafts: list[int], targets: list[int]) -> int:
    """How many drafted tokens the model's own choices (`targets`, one per checked position) confirm, from the
    first: a draft is taken only as far as it equals what the model chose."""
    n = 0
    while n < len(drafts) and drafts[n] == targets[n]:
        n += 1
    return n


def worth(slots: int, row_cost: float = ROW_COST, draft_cost: float = 0.0) -> float:
    """The least chance of being taken a drafted token needs to pay for its row in a pass of `slots` decoding slots:
    its row costs `row_cost` of the pass's fixed part, and the pass's tokens cost (1 + row_cost x slots) / slots each.
    One slot: 0.23; eight: 0.71 (where the pass is compute-bound, drafts rarely pay). A draft model's pass, costing
    `draft_cost` of the target's fixed part, is shared by the slots: (row_cost x slots + draft_cost) / (1 + row_cost
    x slots); past 1, no draft pays."""
    return (row_cost * slots + draft_cost) / (1 + row_cost * slots)


class DraftState:
    """One reply's drafting: its lookup over the slot's tokens, and how often its drafted tokens were taken."""

    def __init__(self) -> None:
        self.lookup = NgramLookup()
        self._taken, self._tried = FIRST_TAKEN, FIRST_TRIED
        # The token the lookup expected next when it asked for a checking pass (Verifier.wanted), if it did.
        self.expected: int | None = None
        self._misses = 0
        self._pause = 0
        self._resume_at = 0  # the reply's generated count from which it drafts again

    @property
    def rate(self) -> float:
        """The chance a drafted token is taken, given those before it were (from the drafts checked so far)."""
        return self._taken / self._tried

    def length(self, least: float, generated: int) -> int:
        """The most tokens to draft at the reply's `generated` tokens such that each is taken with a chance of at least
        `least` (engine: `worth`); none while paused. Where not even one is because the estimate fell below the first
        one, the reply pauses as after drafts that missed, and then starts again from the first estimate: drafts alone
        update it, so a reply whose estimate fell below the bar (a sampled reply leaving the text for a while) would
        otherwise never draft again. (A bar above the first estimate, many slots decoding, only waits for fewer.)"""
        if not self.drafting(generated):
            return 0
        k, chance = 0, self.rate
        while k < MOST_DRAFTED and chance >= least:
            k, chance = k + 1, chance * self.rate
        if k == 0 and self.rate < FIRST_TAKEN / FIRST_TRIED:
            self._taken, self._tried = FIRST_TAKEN, FIRST_TRIED
            self._pause_at(generated)
        return k

    def drafting(self, generated: int) -> bool:
        """Whether the reply drafts at its `generated` tokens (not paused after drafts that missed)."""
        return generated >= self._resume_at

    def draft(self, tokens: list[int], generated: int, room: int) -> list[int]:
        """Up to `room` tokens to check after `tokens` (a slot's history), or [] (none found, or paused)."""
        if not self.drafting(generated) or room < 1:
            return []
        return self.lookup.propose(tokens, room)

    def expect(self, tokens: list[int], generated: int) -> bool:
        """Whether the lookup has a next token to offer after `tokens` (then kept as `expected`)."""
        offered = self.draft(tokens, generated, 1)
        self.expected = offered[0] if offered else None
        return self.expected is not None

    def came(self, token: int, generated: int) -> None:
        """The token that did come after what `expect` saw: another one than expected counts as a draft missed at its
        first token (the step gave up its pipelining for it)."""
        if self.expected is not None and token != self.expected:
            self.record(1, 0, generated)
        self.expected = None

    def record(self, drafted: int, taken: int, generated: int) -> None:
        """A checked draft of `drafted` tokens, `taken` of them accepted, at the reply's `generated` tokens."""
        # Each token taken is a success; the first one not taken, if any, a failure (those after it were not tried).
        self._taken = KEEP * self._taken + taken
        self._tried = KEEP * self._tried + taken + (taken < drafted)
        if taken:
            self._misses, self._pause = 0, 0
            return
        self._misses += 1
        if self._misses >= MISSES_BEFORE_PAUSE:
            self._pause_at(generated)
            self._misses = 0

    def _pause_at(self, generated: int) -> None:
        """No drafts from the reply's `generated` tokens on for twice as many tokens as the last pause (up to
        PAUSE_MOST)."""
        self._pause = min(PAUSE_MOST, max(4, self._pause * 2))
        self._resume_at = generated + self._pause

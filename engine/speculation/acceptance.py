"""How much of a draft the model took, and how many tokens a reply drafts next: more after a draft taken whole,
fewer after one cut short, and none for a while after drafts the model did not take at all."""

from __future__ import annotations

from mlxchat.engine.speculation.lookup import NgramLookup

FIRST_DRAFT = 4  # tokens drafted at first
MOST_DRAFTED = 16  # the longest draft: past it a pass's rows cost more than a miss would save
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


class DraftState:
    """One reply's drafting: its lookup over the slot's tokens, and its next draft's length."""

    def __init__(self) -> None:
        self.lookup = NgramLookup()
        self.k = FIRST_DRAFT
        # The token the lookup expected next when it asked for a checking pass (Verifier.wanted), if it did.
        self.expected: int | None = None
        self._misses = 0
        self._pause = 0
        self._resume_at = 0  # the reply's generated count from which it drafts again

    def draft(self, tokens: list[int], generated: int, room: int) -> list[int]:
        """Up to min(k, `room`) tokens to check after `tokens` (a slot's history), or [] (none found, or paused)."""
        if generated < self._resume_at or room < 1:
            return []
        return self.lookup.propose(tokens, min(self.k, room))

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
        if taken == drafted:
            self.k = min(MOST_DRAFTED, self.k * 2)
        else:
            self.k = max(1, taken + 1)
        if taken:
            self._misses, self._pause = 0, 0
            return
        self._misses += 1
        if self._misses >= MISSES_BEFORE_PAUSE:
            self._pause = min(PAUSE_MOST, max(4, self._pause * 2))
            self._resume_at = generated + self._pause
            self._misses = 0

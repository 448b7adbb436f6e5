"""Drafts from a chat's own tokens: the tokens that followed the latest earlier occurrence of the last few
(prompt lookup decoding, as llama.cpp's n-gram lookup). The chats mlxchat serves quote and edit their
attachments and earlier answers, so a reply often repeats a run of its context."""

from __future__ import annotations

# The longest and shortest n-grams looked up, longest first: a longer match predicts better; a one-token
# match predicts too little to pay for its rows.
LONGEST = 4
SHORTEST = 2


class NgramLookup:
    """An index over one slot's tokens (prompt, earlier turns, the reply so far), grown as they grow:
    for each n-gram, where the token after its latest occurrence is."""

    def __init__(self) -> None:
        self._next: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # tokens whose n-grams ending before them are in the index
        self._tokens: list[int] = []

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to `k` tokens that may come after `tokens`: what followed the latest earlier occurrence of their
        longest suffix (LONGEST down to SHORTEST tokens) seen before; [] where none was."""
        self._index(tokens)
        for n in range(LONGEST, SHORTEST - 1, -1):
            if len(tokens) > n:
                at = self._next.get(tuple(tokens[-n:]))
                if at is not None:
                    return tokens[at : at + k]
        return []

    def _index(self, tokens: list[int]) -> None:
        """Indexes the n-grams of `tokens` not indexed yet; starts over where `tokens` is not the list it grew from
        (a slot's history is replaced when its chat changes)."""
        if tokens is not self._tokens or len(tokens) < self._indexed:
            self._next.clear()
            self._tokens, self._indexed = tokens, 0
        for end in range(max(self._indexed, 1), len(tokens)):
            # The n-grams ending just before `end` are followed by tokens[end].
            for n in range(SHORTEST, LONGEST + 1):
                if end >= n:
                    self._next[tuple(tokens[end - n : end])] = end
        self._indexed = max(self._indexed, len(tokens))

"""Speculative decoding that never changes a word: drafts (from the chat's own tokens) checked in the batched pass."""

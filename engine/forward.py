"""The engine's forward pass: logits at one position per row, skipping the head elsewhere where possible."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx

from mlxchat.engine.cpu import llama as cpu_llama
from mlxchat.engine.cpu import stored
from mlxchat.engine.cpu import tuning
from mlxchat.engine.cpu.blas import SingleThreadedBlas

# Families whose Model.__call__ is exactly `head(self.model(inputs, cache))`, the head being
# lm_head or the tied embedding. For them a prefill chunk skips the head on every position
# but the one it needs (on SmolLM2 that is about a quarter of a chunk's work).
PLAIN_HEAD_FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}


class Forward:
    """Runs the model over (B, L) inputs with the engine's caches."""

    def __init__(self, model: Any, split: bool | None = None) -> None:
        """`split`: run llama on the CPU with matmuls split across two streams; None means split, until
        `mlxchat doctor --tune` measured otherwise on this machine (the caller reads that, engine.cpu.tuning)."""
        family = type(model).__module__.rsplit(".", 1)[-1]
        args = getattr(model, "args", None)
        self._head: Callable[[mx.array], mx.array] | None = None
        self._body: Callable[..., mx.array] = lambda inputs, caches, embeds=None: (
            model(inputs, cache=caches) if embeds is None else model(inputs, cache=caches, input_embeddings=embeds))
        self._cores: SingleThreadedBlas | None = None
        # Several groups of rows (a decode pass and a prompt chunk) through one pass, where the body allows.
        self._bodies: Callable[[list[tuple[mx.array, list[Any]]]], list[mx.array]] | None = None
        # Whether engine.cpu.tuning has ways to choose from for this model on this device.
        self.tunable = False
        if family in PLAIN_HEAD_FAMILIES and args is not None and hasattr(model, "model"):
            if getattr(args, "tie_word_embeddings", False) or not hasattr(model, "lm_head"):
                head, self._head = model.model.embed_tokens, model.model.embed_tokens.as_linear
            else:
                head = self._head = model.lm_head
            self._body = model.model
            runs_llama = cpu_llama.supports(model, head)
            # Quantized layers kept for the kernels have one way to run: the CPU llama's fused calls.
            self.tunable = runs_llama and not stored.holds_stored(model)
            if runs_llama and (split is not False or not self.tunable):
                llama = cpu_llama.CpuLlama(model, head)
                self._body, self._head, self._cores = llama.body, llama.head, llama.cores
                self._bodies = llama.bodies

    def working(self, busy: bool) -> None:
        """Whether the engine has work: a forward that splits matmuls across the cores holds the BLAS
        at one thread only while it does, so other users of the process's BLAS keep its threads."""
        if self._cores is None:
            return
        if busy:
            self._cores.hold()
        else:
            self._cores.release()

    def states(self, inputs: mx.array, caches: list[Any], embeds: dict[str, Any] | None = None) -> mx.array:
        """The pass's output before the head where it can be skipped, else its logits. `embeds`: the rows'
        inputs in place of their tokens (an image's embeddings and a family's own per-position inputs, for a vision
        model's generic body only: engine.prefill.images.ImagePrompt.inputs_of).

        For a pass whose only use is the K/V it stores: evaluate the caches, not this.
        """
        return self._body(inputs, caches) if embeds is None else self._body(inputs, caches, embeds)

    def logits(self, inputs: mx.array, caches: list[Any], positions: mx.array | None,
               embeds: dict[str, Any] | None = None) -> mx.array:
        """Logits (B, vocab) at each row's position (positions (B,), or None when L is 1); `embeds` as `states`."""
        states = _at(self.states(inputs, caches, embeds), positions)
        return self._head(states) if self._head is not None else states

    @property
    def mixes(self) -> bool:
        """Whether decode rows and a prompt chunk can share one pass (`mixed_logits`)."""
        return self._bodies is not None and self._head is not None

    def mixed_logits(
        self, decode: tuple[mx.array, list[Any]], chunk: tuple[mx.array, list[Any]], positions: mx.array | None
    ) -> tuple[mx.array, mx.array | None]:
        """One pass over decode rows (B, 1) and prompt chunks (B', L): the decode rows' logits, and the
        chunks' at `positions` (None: the chunks only store their K/V)."""
        assert self._bodies is not None and self._head is not None
        decoded, chunks = self._bodies([decode, chunk])
        picked = [decoded[:, 0, :]] if positions is None else [decoded[:, 0, :], _at(chunks, positions)]
        logits = self._head(mx.concatenate(picked, axis=0))
        rows = decoded.shape[0]
        return logits[:rows], (logits[rows:] if positions is not None else None)

    def every_logits(self, groups: list[tuple[mx.array, list[Any]]]) -> list[mx.array]:
        """Logits (B, L, vocab) at every position of each group's rows (B, L), with its own caches; several groups
        share one pass only where the body allows it (`mixes`), else there must be one."""
        if self._bodies is not None and self._head is not None:
            states = self._bodies(groups)
        else:
            assert len(groups) == 1, "groups share a pass only where the forward mixes"
            states = [self._body(*groups[0])]
        if self._head is None:
            return states
        logits, out, start = self._head(_rows_of(states)), [], 0
        for s in states:
            b, n = s.shape[:2]
            out.append(logits[start : start + b * n].reshape(b, n, -1))
            start += b * n
        return out


def tunable(model: Any) -> bool:
    """Whether the model has ways to run on this device to choose from (llama on a CPU, its layers not kept stored)."""
    return Forward(model, split=False).tunable


def tune(model: Any, path: Path, on_candidate: Callable[[str], None] | None = None) -> tuning.Tuning:
    """Times the pass both ways on `model`, as the engine runs it (engine.cpu.tuning takes turns between them,
    chooses, and saves the choice in `path`)."""
    from mlxchat.engine.kv import attention

    attention.install(model)  # the slot caches' attention, as the engine runs it
    ways = {split: Forward(model, split=split) for split in (True, False)}
    return tuning.measure(model, path, lambda split, rows: _pass_seconds(ways[split], model, rows), on_candidate)


def _pass_seconds(forward: Forward, model: Any, rows: int) -> float:
    """Seconds for one decode pass of `rows` rows over tuning.CONTEXT cached tokens each."""
    from mlxchat.engine.kv.slot_store import SlotKVStore

    store = SlotKVStore(rows, tuning.CONTEXT + 1, len(model.model.layers))
    store.lengths = [tuning.CONTEXT] * rows
    inputs = mx.zeros((rows, 1), dtype=mx.int32)
    forward.working(True)
    try:
        start = time.perf_counter()
        mx.eval(mx.argmax(forward.logits(inputs, store.batch(list(range(rows)), 1), None), axis=-1))
        return time.perf_counter() - start
    finally:
        forward.working(False)


def _rows_of(states: list[mx.array]) -> mx.array:
    """Every position of every group, as rows (tokens, D)."""
    return mx.concatenate([s.reshape(-1, s.shape[-1]) for s in states], axis=0)


def _at(x: mx.array, positions: mx.array | None) -> mx.array:
    """x[b, positions[b]] for x of shape (B, L, D)."""
    if positions is None:
        return x[:, 0, :]
    return mx.take_along_axis(x, positions[:, None, None], axis=1)[:, 0, :]

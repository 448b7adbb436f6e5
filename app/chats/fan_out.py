"""Fan-out: one prompt sent to several new chats that differ in their settings, each labelled with
what differs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from mlxchat.engine import SamplingParams

DEFAULT_TEMPERATURES = (0.2, 0.7, 1.2)  # a spread from nearly greedy to loose
MIN_VARIANTS, MAX_VARIANTS = 2, 4
SYSTEM_LABEL_CHARS = 12


@dataclass(frozen=True)
class Variant:
    """One chat of a fan-out: its system prompt and sampling."""

    system_prompt: str
    sampling: SamplingParams


def default_variants(system_prompt: str, sampling: SamplingParams) -> list[Variant]:
    """The form's starting point: the given settings at the default spread of temperatures."""
    return [Variant(system_prompt, dataclasses.replace(sampling, temperature=t)) for t in DEFAULT_TEMPERATURES]


def labels(variants: Sequence[Variant]) -> list[str]:
    """Each variant's label: the settings in which the variants differ ("T=0.2", "seed 7",
    "sys: terse"), or its number when they are all alike."""
    def temperature(v: Variant) -> str:
        return f"T={v.sampling.temperature:g}"

    def seed(v: Variant) -> str:
        return "no seed" if v.sampling.seed is None else f"seed {v.sampling.seed}"

    def system(v: Variant) -> str:
        text = " ".join(v.system_prompt.split()) or "none"
        cut = text if len(text) <= SYSTEM_LABEL_CHARS else text[: SYSTEM_LABEL_CHARS - 1].rstrip() + "…"
        return f"sys: {cut}"

    parts = [part for part in (temperature, seed, system) if len({part(v) for v in variants}) > 1]
    if not parts:
        return [f"variant {n}" for n in range(1, len(variants) + 1)]
    return [" · ".join(part(v) for part in parts) for v in variants]

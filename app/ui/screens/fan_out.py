"""The fan-out form: one prompt and 2-4 variants of the settings, each to be its own chat."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from mlxchat.app.chats.fan_out import MAX_VARIANTS, MIN_VARIANTS, Variant
from mlxchat.app.config.settings import Sampling
from mlxchat.app.ui.screens.modal import FormScreen
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.app.ui.workarounds.freed_widgets import FreedTextArea

COLUMNS = ("temperature", "seed", "system prompt")


@dataclass(frozen=True)
class FanOut:
    """What the form sends: the prompt and the variants it goes to."""

    prompt: str
    variants: list[Variant]


class FanOutScreen(FormScreen[FanOut | None]):
    """Edits a prompt and its variants (pre-filled from `variants`; the rows past them start empty, an
    empty row is left out, and an empty field takes `base`'s value); dismisses with the fan-out to send,
    or None."""

    CSS_PATH = "fan_out.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "confirm", "Send", priority=True)]

    def __init__(self, base: Variant, variants: Sequence[Variant], prompt: str = "") -> None:
        super().__init__()
        self._base = base
        self._variants = list(variants)[:MAX_VARIANTS]
        self._prompt = prompt

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Fan-out: one prompt to several chats, side by side", classes="fan-out-title")
            yield Label("Prompt")
            yield FreedTextArea(self._prompt, id="fan-out-prompt", soft_wrap=True)
            with Grid(id="fan-out-variants"):
                yield Label("")
                for column in COLUMNS:
                    yield Label(column, classes="column")
                for row in range(MAX_VARIANTS):
                    variant = self._variants[row] if row < len(self._variants) else None
                    yield Label(f"chat {row + 1}")
                    yield Input("" if variant is None else f"{variant.sampling.temperature:g}",
                                id=f"temperature-{row}", placeholder=f"{self._base.sampling.temperature:g}")
                    seed = None if variant is None else variant.sampling.seed
                    yield Input("" if seed is None else str(seed), id=f"seed-{row}", placeholder="none")
                    yield Input("" if variant is None else variant.system_prompt, id=f"system-{row}",
                                placeholder="none")
            yield Static(id="form-error", markup=False)
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Send to each", id="confirm", variant="primary")
            yield Static(f"{MIN_VARIANTS}–{MAX_VARIANTS} chats: an empty row is left out · ctrl+s sends · "
                         "escape cancels", classes="fan-out-hint")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(FreedTextArea).focus()

    def read(self) -> FanOut:
        """The fan-out as typed; raises ValueError with every problem, one per line."""
        prompt = self.query_one(FreedTextArea).text.strip()
        problems = [] if prompt else ["prompt: write the message to send"]
        base = self._base
        variants = []
        for row in range(MAX_VARIANTS):
            temperature, seed, system = (self.query_one(f"#{name}-{row}", Input).value.strip()
                                         for name in ("temperature", "seed", "system"))
            if not (temperature or seed or system):
                continue
            try:
                # The config's own checks: one set of limits for the file and the form.
                checked = Sampling.model_validate({"temperature": temperature or base.sampling.temperature,
                                                   "seed": seed or None})
            except ValidationError as exc:
                problems += [f"chat {row + 1}, {e['loc'][0]}: {e['msg']}" for e in exc.errors()]
                continue
            sampling = dataclasses.replace(base.sampling, temperature=checked.temperature, seed=checked.seed)
            variants.append(Variant(system, sampling))
        if len(variants) < MIN_VARIANTS and not problems:
            problems.append(f"fill at least {MIN_VARIANTS} rows: a fan-out compares {MIN_VARIANTS} chats or more")
        if problems:
            raise ValueError("\n".join(problems))
        return FanOut(prompt, variants)

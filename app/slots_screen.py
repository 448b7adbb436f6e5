"""F2: the number of slots and the total context, with the engine's evaluation shown live, then applied.

Nothing changes until Apply: the slider and the total only re-run the engine's own evaluation
(engine.slot_plan through ModelFacts), whose summary, figures, warnings and errors are shown as
they are. Apply re-partitions the engine off the UI thread, re-seats the chats and saves the
values to the user's config file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.validation import Integer
from textual.widgets import Button, Footer, Input, Label, Static

from app.config import ConfigError, default_config_path, save_settings
from app.confirm import ConfirmScreen
from app.modal_screen import AppModalScreen
from app.slider import Slider
from engine import memory
from engine.slot_plan import SlotPlan

if TYPE_CHECKING:
    from app.chat_app import ChatApp

TOTAL_HELP = "The total context must be a whole number of tokens above 0, e.g. 8192."


def assign_slots(current: Sequence[int | None], parallel: int) -> list[int | None]:
    """The slot each chat (in tab order) gets out of `parallel` slots.

    A chat keeps its slot while that slot exists (so its KV cache can survive); the other chats
    take the free slots in tab order; chats beyond the number of slots get none.
    """
    kept = [slot if slot is not None and slot < parallel else None for slot in current]
    free = iter(sorted(set(range(parallel)) - set(kept)))
    return [slot if slot is not None else next(free, None) for slot in kept]


def _names(titles: Sequence[str]) -> str:
    """"Chat 3", "Chat 3 and Chat 4", "Chat 2, Chat 3 and Chat 4"."""
    return titles[0] if len(titles) == 1 else ", ".join(titles[:-1]) + " and " + titles[-1]


class SlotsScreen(AppModalScreen[None]):
    """Choose N and the total context; the summary, KV memory, memory available and the engine's
    warnings and errors follow every change; Apply re-partitions the engine."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "apply", "Apply"),
    ]
    AUTO_FOCUS = "#slots-n"

    DEFAULT_CSS = """
    SlotsScreen { align: center middle; }
    SlotsScreen #slots-box {
        width: 84; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 2;
    }
    SlotsScreen Label { margin-top: 1; text-style: bold; }
    SlotsScreen #slots-total { width: 24; }
    SlotsScreen #slots-total-error { color: $error; height: auto; }
    SlotsScreen #slots-summary { margin-top: 1; text-style: bold; color: $primary; }
    SlotsScreen .figure { color: $text-muted; }
    SlotsScreen #slots-warnings { color: $warning; height: auto; }
    SlotsScreen #slots-errors { color: $error; height: auto; }
    SlotsScreen #slots-now { margin-top: 1; color: $text-muted; }
    SlotsScreen #slots-buttons { height: auto; margin: 1 0; align-horizontal: right; }
    SlotsScreen Button { margin-left: 2; }
    """

    class Repartitioned(Message):
        """The engine now runs `plan`; `survived` maps each old slot id to whether its KV cache was kept."""

        def __init__(self, plan: SlotPlan, survived: Mapping[int, bool]) -> None:
            super().__init__()
            self.plan = plan
            self.survived = survived

    class RepartitionFailed(Message):
        """The engine could not re-partition (it keeps its slots as they were)."""

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(self) -> None:
        super().__init__()
        self._plan: SlotPlan | None = None  # the evaluation on the screen; None while the total is unusable
        self._applying = False

    @property
    def chat_app(self) -> ChatApp:
        """The app, with its engine, plan and chats."""
        return cast("ChatApp", self.app)

    def compose(self) -> ComposeResult:
        app = self.chat_app
        assert app.plan is not None
        with Vertical(id="slots-box") as box:
            box.border_title = "Parallel slots"
            box.border_subtitle = "nothing changes until Apply"
            yield Label("", id="slots-n-label")
            yield Slider(1, app.settings.parallel_max, app.plan.parallel, id="slots-n")
            yield Label("Total context (tokens), shared by all slots")
            yield Input(
                str(app.plan.ctx_size),
                type="integer",
                validators=[Integer(minimum=1, failure_description=TOTAL_HELP)],
                validate_on=["changed"],
                id="slots-total",
            )
            yield Static("", id="slots-total-error", markup=False)
            yield Static("", id="slots-summary", markup=False)
            yield Static("", id="slots-kv", classes="figure", markup=False)
            yield Static("", id="slots-memory", classes="figure", markup=False)
            yield Static("", id="slots-warnings", markup=False)
            yield Static("", id="slots-errors", markup=False)
            yield Static("", id="slots-now", markup=False)
            with Horizontal(id="slots-buttons"):
                yield Button("Apply", variant="primary", id="slots-apply")
                yield Button("Cancel", id="slots-cancel")
        yield Footer()

    def on_mount(self) -> None:
        self._evaluate()

    @on(Slider.Changed)
    @on(Input.Changed)
    def _changed(self) -> None:
        self._evaluate()

    def _total(self) -> int | None:
        """The total context typed, or None (with the reason shown under the box) when it is not usable."""
        box = self.query_one("#slots-total", Input)
        result = box.validate(box.value)
        error = "" if result is None or result.is_valid else TOTAL_HELP
        self.query_one("#slots-total-error", Static).update(error)
        self.query_one("#slots-total-error", Static).display = bool(error)
        return None if error else int(box.value)

    def _evaluate(self) -> None:
        """Re-runs the engine's evaluation for the values on the screen and shows it, without applying."""
        app = self.chat_app
        assert app.plan is not None and app.model_facts is not None
        n = self.query_one("#slots-n", Slider).value
        self.query_one("#slots-n-label", Label).update(f"Slots: {n}  (1..{app.settings.parallel_max})")
        total = self._total()
        self._plan = None if total is None else app.model_facts.evaluate(
            {**app.settings.slot_request(), "parallel": n, "ctx_size": total}
        )
        plan = self._plan
        available = memory.memory_info()
        fmt = memory.format_bytes
        self.query_one("#slots-summary", Static).update(plan.summary if plan else "")
        self.query_one("#slots-kv", Static).update(
            f"KV cache: {fmt(plan.kv_bytes)} ({fmt(plan.kv_bytes_per_slot)} per slot)" if plan else ""
        )
        self.query_one("#slots-memory", Static).update(
            "Memory available: "
            + (fmt(available.available_bytes) if available.available_bytes is not None else "unknown")
            + (f" of {fmt(available.total_bytes)}" if available.total_bytes is not None else "")
        )
        self._show_lines("#slots-warnings", "⚠ ", plan.warnings if plan else ())
        self._show_lines("#slots-errors", "✖ ", plan.errors if plan else ())
        unchanged = plan is not None and (plan.parallel, plan.ctx_size, plan.per_slot) == (
            app.plan.parallel, app.plan.ctx_size, app.plan.per_slot
        )
        open_chats = len(app.chat_panes)
        self.query_one("#slots-now", Static).update(
            f"Now: {app.plan.summary} · {open_chats} chat{'s' if open_chats != 1 else ''} open"
            + (" · this is the current plan" if unchanged else "")
        )
        self.query_one("#slots-apply", Button).disabled = self._applying or plan is None or not plan.ok or unchanged

    def _show_lines(self, selector: str, mark: str, lines: Sequence[str]) -> None:
        widget = self.query_one(selector, Static)
        widget.update("\n".join(mark + line for line in lines))
        widget.display = bool(lines)

    @on(Button.Pressed, "#slots-cancel")
    def action_cancel(self) -> None:
        """Leaves everything as it was (not while the engine is being re-partitioned: that cannot be undone)."""
        if self._applying:
            self.notify("The slots are being re-partitioned: a moment.")
            return
        self.dismiss()

    @on(Button.Pressed, "#slots-apply")
    def action_apply(self) -> None:
        """Applies the plan on the screen, asking first when chats would lose their slot or replies would stop."""
        plan = self._plan
        if self._applying or plan is None or self.query_one("#slots-apply", Button).disabled:
            return
        panes = self.chat_app.chat_panes
        seats = assign_slots([pane.slot_id for pane in panes], plan.parallel)
        losing = [p.chat_title for p, seat in zip(panes, seats) if seat is None and p.slot_id is not None]
        busy = [pane.chat_title for pane in panes if pane.busy]
        if not losing and not busy:
            self._start(plan)
            return
        parts = []
        if losing:
            one = len(losing) == 1
            parts.append(
                f"With {plan.parallel} slot{'s' if plan.parallel != 1 else ''} for {len(panes)} chats, "
                f"{_names(losing)} {'loses its' if one else 'lose their'} slot. Nothing is lost: "
                f"{'it stays open with its text and takes' if one else 'they stay open with their text and take'} "
                "a slot again when one frees (close a chat, or add slots here)."
            )
        if busy:
            parts.append(f"The reply being written in {_names(busy)} stops here; what was written is kept.")
        title = "Fewer slots than chats" if losing else "Replies are being written"

        def answered(go_on: bool | None) -> None:
            if go_on:
                self._start(plan)

        self.app.push_screen(ConfirmScreen(title, "\n\n".join(parts), f"Apply {plan.summary}"), answered)

    def _start(self, plan: SlotPlan) -> None:
        self._applying = True
        for widget in self.query("#slots-n, #slots-total, Button"):
            widget.disabled = True
        self.query_one("#slots-now", Static).update(f"Re-partitioning the engine to {plan.summary}…")
        self._repartition(plan)

    @work(thread=True, exclusive=True, exit_on_error=False, group="repartition")
    def _repartition(self, plan: SlotPlan) -> None:
        """Waits for the engine thread to rebuild its slots (it stops replies in progress first)."""
        engine = self.chat_app.engine
        assert engine is not None
        try:
            survived = engine.repartition(plan).result()
        except Exception as exc:  # e.g. no memory for the new KV cache: the engine keeps its old slots
            self.post_message(self.RepartitionFailed(f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(self.Repartitioned(plan, survived))

    @on(Repartitioned)
    async def _done(self, event: Repartitioned) -> None:
        await self.chat_app.adopt_plan(event.plan, event.survived)
        self._save(event.plan)
        self._applying = False
        self.dismiss()

    @on(RepartitionFailed)
    def _failed(self, event: RepartitionFailed) -> None:
        self._applying = False
        for widget in self.query("#slots-n, #slots-total, #slots-cancel"):
            widget.disabled = False
        self._evaluate()
        self.notify(f"The slots were not changed: {event.error}", severity="error", timeout=10)

    def _save(self, plan: SlotPlan) -> None:
        """Writes the applied values to the user's config file and says where (or why it could not)."""
        path: Path = self.chat_app.settings.config_file or default_config_path()
        title = f"Applied: {plan.summary}"
        try:
            save_settings({"parallel": plan.requested_parallel, "ctx_size": plan.ctx_size}, path)
        except ConfigError as exc:
            self.notify(f"Not saved: {exc}", title=title, severity="error", timeout=15)
        except OSError as exc:
            self.notify(f"Not saved to {path}: {exc.strerror or exc}", title=title, severity="error", timeout=15)
        else:
            self.notify(f"Saved parallel = {plan.requested_parallel} and ctx_size = {plan.ctx_size} to {path}",
                        title=title, timeout=8)

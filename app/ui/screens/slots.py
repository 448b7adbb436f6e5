"""F2: the number of slots and the total context, with the engine's evaluation shown live, then applied.

Nothing changes until Apply: the slider and the total only re-run the engine's own evaluation
(mlxchat.engine.plan, through the session), whose summary, figures, warnings and errors are shown
as they are. Apply asks the session to re-partition the engine and re-seat the chats, learns the
outcome by a message, and saves the values to the user's config file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.validation import Integer
from textual.widgets import Button, Input, Label, Static

from mlxchat.app.config.limits import CONTEXT_CEILING
from mlxchat.app.config.loading import keep_settings
from mlxchat.app.config.settings import ConfigError, Settings, settings_problems
from mlxchat.app.paths import default_config_path
from mlxchat.app.session.messages import PlanChanged, PlanRefused
from mlxchat.app.session.session import Session
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.modal import AppModalScreen
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.app.ui.widgets.slider import Slider
from mlxchat.engine import format_bytes, memory_info, SlotPlan

TOTAL_HELP = f"The total context must be a whole number of tokens above 0 and at most {CONTEXT_CEILING}, e.g. 8192."


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

    CSS_PATH = "slots.tcss"

    def __init__(self, session: Session, settings: Settings) -> None:
        super().__init__()
        assert session.plan is not None
        self._session = session
        self._settings = settings  # the slot settings the slider starts from, and where Apply saves
        self._now = session.plan  # the plan the engine runs
        self._plan: SlotPlan | None = None  # the evaluation on the screen; None while the total is unusable
        self._applying = False

    def compose(self) -> ComposeResult:
        with Vertical(id="slots-box") as box:
            box.border_title = "Parallel slots"
            box.border_subtitle = "nothing changes until Apply"
            yield Label("", id="slots-n-label")
            yield Slider(1, self._settings.parallel_max, self._now.parallel, id="slots-n")
            yield Label("Total context (tokens), shared by all slots")
            yield Input(
                str(self._now.ctx_size),
                type="integer",
                validators=[Integer(minimum=1, maximum=CONTEXT_CEILING, failure_description=TOTAL_HELP)],
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
        now = self._now
        n = self.query_one("#slots-n", Slider).value
        self.query_one("#slots-n-label", Label).update(f"Slots: {n}  (1..{self._settings.parallel_max})")
        total = self._total()
        evaluated, errors = None, []
        if total is not None:
            candidate = self._settings.updated({"parallel": n, "ctx_size": total}, "this screen")
            evaluated = self._session.evaluate(candidate.slot_request())
            # The config also refuses what the evaluation alone allows (e.g. more than the model can use).
            assert self._session.facts is not None
            errors = [*evaluated.errors, *settings_problems(candidate, self._session.facts.trained_ctx)]
        # A plan that could not run is neither summarised nor applied.
        self._plan = plan = None if errors else evaluated
        available = memory_info()
        fmt = format_bytes
        self.query_one("#slots-summary", Static).update(plan.summary if plan else "")
        self.query_one("#slots-kv", Static).update(
            f"KV cache: {plan.kv_summary}" if plan else ""
        )
        self.query_one("#slots-memory", Static).update(
            "Memory available: "
            + (fmt(available.available_bytes) if available.available_bytes is not None else "unknown")
            + (f" of {fmt(available.total_bytes)}" if available.total_bytes is not None else "")
        )
        outgrown = [f"“{title}” holds {tokens} tokens, more than a slot of {plan.per_slot}: its next message "
                    "would be refused (start a new chat, or fork it at an earlier message)"
                    for title, tokens in self._session.outgrown(plan.per_slot)] if plan else []
        self._show_lines("#slots-warnings", "⚠ ", [*(evaluated.warnings if evaluated else ()), *outgrown,
                                                    *self._listing_warning(plan)])
        self._show_lines("#slots-errors", "✖ ", errors)
        unchanged = plan is not None and (plan.parallel, plan.ctx_size, plan.per_slot) == (
            now.parallel, now.ctx_size, now.per_slot
        )
        open_chats = self._session.open_count
        self.query_one("#slots-now", Static).update(
            f"Now: {now.summary} · {open_chats} chat{'s' if open_chats != 1 else ''} open"
            + (" · this is the current plan" if unchanged else "")
        )
        self.query_one("#slots-apply", Button).disabled = self._applying or plan is None or unchanged

    def _listing_warning(self, plan: SlotPlan | None) -> list[str]:
        """Where the tool listing leaves a slot less than the per-slot floor for the conversation itself."""
        counted = self._session.tools.listing_tokens(self._settings.system_prompt)
        if plan is None or counted is None or not counted[1]:
            return []
        whole, listing = counted
        left, floor = plan.per_slot - whole, self._settings.per_slot_floor
        if left >= floor:
            return []
        return [f"the system prompt and tool listing take {whole:,} tokens of each slot's {plan.per_slot:,} (the tools "
                f"{listing:,}): {max(left, 0):,} are left for the conversation, under per_slot_floor = {floor:,} "
                "(use fewer slots, a larger total context, or fewer MCP servers)"]

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
        losing = self._session.losing_seats(plan)
        busy = self._session.busy_titles()
        if not losing and not busy:
            self._start(plan)
            return
        parts = []
        if losing:
            one = len(losing) == 1
            parts.append(
                f"With {plan.parallel} slot{'s' if plan.parallel != 1 else ''} for {self._session.open_count} chats, "
                f"{_names(losing)} {'loses its' if one else 'lose their'} slot. Nothing is lost: "
                f"{'it stays open with its text and borrows' if one else 'they stay open with their text and borrow'} "
                "an idle slot on the next message, prefilling the conversation again."
            )
        if busy:
            parts.append(f"The reply being written in {_names(busy)} stops here; what was written is kept.")
        title = "Fewer slots than chats" if losing else "Replies are being written"

        def answered(go_on: bool | None) -> None:
            if go_on:
                self._start(plan)

        # (the plan in the question: a button that long pushed "Keep (n)" out of the dialog)
        parts.insert(0, f"Apply {plan.summary}?")
        self.app.push_screen(ConfirmScreen(title, "\n\n".join(parts), "Apply"), answered)

    def _start(self, plan: SlotPlan) -> None:
        self._applying = True
        for widget in self.query("#slots-n, #slots-total, Button"):
            widget.disabled = True
        self.query_one("#slots-now", Static).update(f"Re-partitioning the engine to {plan.summary}…")
        self._session.apply_plan(plan, self)

    @on(PlanChanged)
    def _done(self, event: PlanChanged) -> None:
        self._save(event.plan)
        self._applying = False
        self.dismiss()

    @on(PlanRefused)
    def _failed(self, event: PlanRefused) -> None:
        self._applying = False
        for widget in self.query("#slots-n, #slots-total, #slots-cancel"):
            widget.disabled = False
        self._evaluate()
        self.notify(f"The slots were not changed: {event.error}", severity="error", timeout=10)

    def _save(self, plan: SlotPlan) -> None:
        """Keeps the applied values (keep_settings: the config file and the app's settings) and says where (or why it
        could not)."""
        path: Path = self._settings.config_file or default_config_path()
        title = f"Applied: {plan.summary}"
        try:
            self.app.settings, _ = keep_settings(self.app.settings, {"parallel": plan.requested_parallel,
                                                                     "ctx_size": plan.ctx_size})
        except ConfigError as exc:
            self.notify(f"Not saved: {exc}", title=title, severity="error", timeout=15)
        except OSError as exc:
            self.notify(f"Not saved to {path}: {exc.strerror or exc}", title=title, severity="error", timeout=15)
        else:
            self.notify(f"Saved parallel = {plan.requested_parallel} and ctx_size = {plan.ctx_size} to {path}",
                        title=title, timeout=8)

"""The slot inspector (F3): every engine slot, live, with keys to go to its chat, stop it, clear it or see it all."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Protocol

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.modal import AppModalScreen
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.app.ui.widgets.slot_rates import SlotRates
from mlxchat.app.ui.slot_words import usage_bar
from mlxchat.engine import EngineSnapshot, format_bytes, ParkedSnapshot, SamplingParams, SlotSnapshot

REFRESH_S = 0.25  # as often as the chats' status lines
BAR_WIDTH = 6
STATE_STYLES = {"idle": "dim", "prefill": "bold yellow", "decoding": "bold green", "thinking": "bold magenta",
                "tool": "bold cyan"}

# (column key, heading, numeric): the table's columns, in order; the sampling, longest, goes last.
COLUMNS = (
    ("slot", "Slot", True),
    ("chat", "Chat", False),
    ("state", "State", False),
    ("context", "Context used", False),
    ("prompt", "Prompt", True),
    ("cached", "Cached", True),
    ("generated", "Generated", True),
    ("speed", "tok/s", True),
    ("kv", "KV used / allocated", True),
    ("sampling", "Sampling", False),
)
NUMERIC = {key for key, _, numeric in COLUMNS if numeric}
HEADINGS = {key: heading for key, heading, _ in COLUMNS}
# Where the table is wider than the screen, the columns left out first (each slot's every field is behind d):
# at 120 columns the KV (the engine's is above the table); at 80 the sampling, the prompt's figures too.
LEFT_OUT_FIRST = ("kv", "sampling", "cached", "prompt", "speed", "generated")


class SlotSource(Protocol):
    """What the inspector needs: the app passes its Session, a snapshot test a fixed stand-in."""

    def snapshot(self) -> EngineSnapshot: ...

    def cancel_slot(self, slot: int) -> None: ...

    def clear_slot(self, slot: int) -> None: ...

    def queue_titles(self) -> list[str]: ...


def sampling_text(sampling: SamplingParams | None) -> str:
    """The sampling parameters of a slot's request in a few characters ("greedy" for temperature 0); its
    max_tokens is in the Generated column."""
    if sampling is None:
        return "–"
    if sampling.temperature == 0:
        return "greedy"
    parts = [f"t={sampling.temperature:g}"]
    if sampling.top_p < 1:
        parts.append(f"p={sampling.top_p:g}")
    if sampling.top_k:
        parts.append(f"k={sampling.top_k}")
    return " ".join(parts)


def _cell(text: str, style: str = "") -> Text:
    # end="": a Text ends with a newline by default, which a table cell must not have.
    return Text(text, style=style, end="")


def slot_cells(slot: SlotSnapshot) -> dict[str, Text]:
    """One table row: each column's cell for `slot`."""
    prompt = str(slot.prompt_tokens)
    if slot.state == "prefill":  # how far the prompt has gone through the model
        prompt = f"{slot.prompt_processed} / {slot.prompt_tokens}"
    bar = usage_bar(slot.used, slot.capacity, BAR_WIDTH)
    used = str(slot.used).rjust(len(str(slot.capacity)))
    capacity = str(slot.capacity) if slot.capacity else "?"  # a server that does not say its context
    thinking = slot.state == "decoding" and slot.reasoning_tokens is not None
    state = "thinking" if thinking else slot.state
    cells = {
        "slot": _cell(str(slot.id)),
        "chat": _cell(slot.label, "bold") if slot.label else _cell("no chat", "dim italic"),
        "state": _cell(state, STATE_STYLES[state]),
        "context": _cell(f"{bar} {used} / {capacity}"),
        "prompt": _cell(prompt),
        "cached": _cached_cell(slot),
        # A reply that reasons: how many of its tokens are reasoning so far.
        "generated": _generated_cell(slot, thinking),
        # An idle slot keeps its last reply's speed: shown, but dimmed.
        "speed": _cell(f"{slot.tok_s:.1f}", "dim" if slot.state == "idle" else ""),
        "kv": _cell(f"{format_bytes(slot.kv_bytes_used)} / {format_bytes(slot.kv_bytes_allocated)}"),
        "sampling": _cell(sampling_text(slot.sampling)),
    }
    for key in NUMERIC:
        cells[key].justify = "right"
    return cells


def _generated_cell(slot: SlotSnapshot, thinking: bool) -> Text:
    """Its reply's tokens so far, of its max_tokens: how many are reasoning, and how many drafted tokens the model
    took."""
    text = str(slot.generated) if slot.sampling is None else f"{slot.generated} / {slot.sampling.max_tokens}"
    if thinking:
        text += f" ({slot.reasoning_tokens} thinking)"
    if slot.drafted:
        text += f" · drafts {100 * slot.accepted / slot.drafted:.0f}% of {slot.drafted}"
    return _cell(text)


def _cached_cell(slot: SlotSnapshot) -> Text:
    """Tokens reused from the slot; and, marked, those it held but had to prefill again (a window or
    recurrent layer cannot roll back to an edited turn's common prefix)."""
    if not slot.refilled_tokens:
        return _cell(str(slot.cached_tokens))
    return _cell(f"{slot.cached_tokens} (+{slot.refilled_tokens} again)", "yellow")


def engine_figures(snapshot: EngineSnapshot, queue: Sequence[str] = (), per_row: int = 3) -> Table | Group:
    """The engine-wide figures, as label / value pairs in a grid (`per_row` pairs a row), the chats waiting for a
    slot, then whether batching changes replies and whether the model sees images."""
    n = len(snapshot.slots)
    waiting = f"{len(queue)} waiting, next: {queue[0]}" if queue else "none waiting"
    if snapshot.server is not None:  # a remote engine: no weights, KV or memory of its own to show
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        grid.add_row("Model", snapshot.model)
        grid.add_row("Server", snapshot.device)
        grid.add_row("Slots", f"{n} × {snapshot.per_slot or '?'} tokens · "
                              f"{snapshot.aggregate_tok_s:.1f} tok/s, all slots")
        grid.add_row("Source", snapshot.server)
        grid.add_row("Queue", waiting)
        if snapshot.images:
            grid.add_row("Images", snapshot.images)
        return grid
    # Three label / value pairs a row fit 120 columns, two fit 80; labels keep their width, values are cut instead.
    pairs = (
        ("Model", snapshot.model), ("Device", snapshot.device), ("BLAS", snapshot.blas),
        ("dtype", snapshot.dtype), ("Weights", format_bytes(snapshot.weights_bytes)),
        ("KV", f"{format_bytes(snapshot.kv_bytes_used)} used / {format_bytes(snapshot.kv_bytes_allocated)}"
               + (f" · {snapshot.kv_dtype}" if snapshot.kv_dtype else "")),
        ("Speed", f"{snapshot.aggregate_tok_s:.1f} tok/s, all slots"),
        ("Memory", f"{format_bytes(snapshot.active_bytes)} active · {format_bytes(snapshot.peak_bytes)} peak"),
        ("Slots", f"{n} × {snapshot.per_slot} tokens"),
        ("Queue", waiting),
        ("Parked", f"{len(snapshot.parked)} · {format_bytes(snapshot.parked_bytes)} / "
                   f"{format_bytes(snapshot.park_budget_bytes)}"),
        ("Disk", snapshot.disk or "off (disk_kv_mb = 0)"),
    )
    rows = [pairs[i : i + per_row] for i in range(0, len(pairs), per_row)]
    grid = Table.grid(padding=(0, 1))
    for column in range(per_row):
        grid.add_column(style="bold", no_wrap=True, min_width=max(len(row[column][0]) for row in rows))
        grid.add_column(no_wrap=True, overflow="ellipsis")
    for row in rows:
        grid.add_row(*(text for pair in row for text in pair))
    said = [Text.assemble(("Batching ", "bold"), snapshot.batching)] if snapshot.batching else []
    if snapshot.batching and snapshot.speculation:
        said.append(Text.assemble(("Speculation ", "bold"), snapshot.speculation))
    if snapshot.images:
        said.append(Text.assemble(("Images ", "bold"), snapshot.images))
    return Group(grid, *said) if said else grid


def parked_table(parked: Sequence[ParkedSnapshot]) -> Group:
    """The parked prefixes, most recently parked first: whose chat, how many tokens, the bytes they hold."""
    heading = Text("Parked KV of chats that lent their slot, newest first (past the budget the last goes)",
                   style="bold")
    table = Table(box=None, padding=(0, 2), expand=False)
    table.add_column("Chat")
    table.add_column("Tokens", justify="right")
    table.add_column("KV", justify="right")
    for p in parked:
        table.add_row(_cell(p.label, "bold") if p.label else _cell("no chat", "dim italic"), str(p.tokens),
                      format_bytes(p.nbytes))
    if not parked:
        table.add_row(_cell("none", "dim italic"), "", "")
    return Group(heading, table)


def _field_text(name: str, value: object) -> str:
    if name.startswith("kv_bytes") and isinstance(value, int):
        return f"{value} ({format_bytes(value)})"
    if isinstance(value, float):
        return f"{value:.2f}"
    return "none" if value is None else str(value)


def slot_details(slot: SlotSnapshot) -> Content:
    """Every field of a slot's snapshot (its sampling parameters one by one), with bytes also in units."""
    named: list[tuple[str, object]] = []
    for f in fields(slot):
        value = getattr(slot, f.name)
        if isinstance(value, SamplingParams):
            named += [(f"sampling.{sf.name}", getattr(value, sf.name)) for sf in fields(value)]
        else:
            named.append((f.name, value))
    width = max(len(name) for name, _ in named) + 2
    return Content("\n").join(
        Content.assemble((name.ljust(width), "bold"), _field_text(name, value)) for name, value in named
    )


class SlotTable(DataTable):
    """The slots, one per row; j and k move as the arrows do."""

    BINDINGS = [
        Binding("j", "cursor_down", "Next slot", show=False),
        Binding("k", "cursor_up", "Previous slot", show=False),
    ]


class InspectorScreen(Screen[int | None]):
    """Every slot of the engine, refreshed live; dismisses with the slot whose chat the user goes to."""

    BINDING_GROUP_TITLE = SUB_TITLE = "Slot inspector"
    BINDINGS = [
        # A priority binding: the table's own Enter (select_cursor) would otherwise take the key.
        Binding("enter", "goto_chat", "Go to chat", tooltip="Close the inspector and show this slot's chat",
                priority=True, id="inspector.goto_chat"),
        Binding("c", "cancel_reply", "Stop reply", tooltip="Stop this slot's reply, keeping what was written",
                id="inspector.cancel_reply"),
        Binding("x", "clear_cache", "Clear cache", tooltip="Forget this slot's cached KV (asks first)",
                id="inspector.clear_cache"),
        Binding("d", "show_detail", "Detail", tooltip="Every field of this slot", id="inspector.show_detail"),
        Binding("escape", "close", "Close", tooltip="Back to the chats", id="inspector.close"),
    ]
    CSS_PATH = "inspector.tcss"

    def __init__(self, slots: SlotSource) -> None:
        super().__init__()
        self._slots = slots
        self._snapshot: EngineSnapshot | None = None
        self._queue: list[str] = []
        self._shown: list[str] = []  # the table's columns (those that fit the screen)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="inspector-figures")
        yield SlotTable(cursor_type="row", zebra_stripes=True)
        yield Static(id="inspector-left-out")
        yield Static(id="inspector-parked")
        yield SlotRates(id="inspector-rates")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_slots()
        self.set_interval(REFRESH_S, self.refresh_slots)

    def on_resize(self) -> None:
        if self._snapshot is not None:
            self._show_figures(self._snapshot)
            self._show_slots(self._snapshot, rebuild=self._fitting(self._snapshot) != self._shown)

    def refresh_slots(self) -> None:
        """Reads a new snapshot and updates the figures and the rows in place (the cursor stays put)."""
        old, snapshot, queue = self._snapshot, self._slots.snapshot(), self._slots.queue_titles()
        self.query_one(SlotRates).record(snapshot, time.monotonic())
        if snapshot == old and queue == self._queue:  # an idle engine: nothing to redraw
            return
        self._snapshot, self._queue = snapshot, queue
        self._show_figures(snapshot)
        parked = self.query_one("#inspector-parked", Static)
        parked.display = snapshot.server is None  # a server keeps its own cache, which it does not show
        if old is None or snapshot.parked != old.parked:
            parked.update(parked_table(snapshot.parked))
        repartitioned = old is None or [s.id for s in old.slots] != [s.id for s in snapshot.slots]
        self._show_slots(snapshot, rebuild=repartitioned or self._fitting(snapshot) != self._shown)

    def _show_figures(self, snapshot: EngineSnapshot) -> None:
        per_row = 3 if self.app.size.width >= 120 else 2
        self.query_one("#inspector-figures", Static).update(engine_figures(snapshot, self._queue, per_row))

    def _fitting(self, snapshot: EngineSnapshot) -> list[str]:
        """The columns whose cells fit the screen's width, all of them where they fit (LEFT_OUT_FIRST)."""
        table = self.query_one(SlotTable)
        room = self.app.size.width - table.styles.scrollbar_size_vertical  # (the table spans the screen)
        rows = [slot_cells(slot) for slot in snapshot.slots]
        widths = {key: 2 * table.cell_padding + max([len(heading), *(row[key].cell_len for row in rows)])
                  for key, heading in HEADINGS.items()}
        shown = list(HEADINGS)
        for key in LEFT_OUT_FIRST:
            if sum(widths[k] for k in shown) <= room:
                break
            shown.remove(key)
        return shown

    def _show_slots(self, snapshot: EngineSnapshot, rebuild: bool) -> None:
        """The rows of `snapshot`'s slots: updated in place, or made again with the columns that fit (the first
        time, after a repartition or a resize), the cursor on the same line if it still exists."""
        table = self.query_one(SlotTable)
        if not rebuild:
            for slot in snapshot.slots:
                cells = slot_cells(slot)
                for key in self._shown:
                    table.update_cell(str(slot.id), key, cells[key], update_width=True)
            return
        self._shown, row = self._fitting(snapshot), table.cursor_row
        table.clear(columns=True)
        for key in self._shown:
            table.add_column(Text(HEADINGS[key], justify="right" if key in NUMERIC else "left"), key=key)
        for slot in snapshot.slots:
            cells = slot_cells(slot)
            table.add_row(*(cells[key] for key in self._shown), key=str(slot.id))
        table.move_cursor(row=min(row, len(snapshot.slots) - 1))
        left_out = [HEADINGS[key] for key in HEADINGS if key not in self._shown]
        note = self.query_one("#inspector-left-out", Static)
        note.display = bool(left_out)
        note.update(f"Left out at this width: {', '.join(left_out)} · d shows them")

    @property
    def selected_slot(self) -> SlotSnapshot | None:
        """The slot under the cursor, as of the last refresh."""
        if self._snapshot is None or not self._snapshot.slots:
            return None
        return self._snapshot.slots[self.query_one(SlotTable).cursor_row]

    def action_goto_chat(self) -> None:
        """Closes the inspector on the selected slot's chat, or says that the slot has none."""
        slot = self.selected_slot
        if slot is None:
            return
        if slot.label is None:
            self.notify(f"Slot {slot.id} has no chat: the next chat that sends without a slot takes it.",
                        severity="warning")
            return
        self.dismiss(slot.id)

    @on(DataTable.RowSelected)
    def _clicked(self, event: DataTable.RowSelected) -> None:
        # The table selects a row when it is clicked a second time: the mouse's way to go to its chat.
        event.stop()
        self.action_goto_chat()

    def action_cancel_reply(self) -> None:
        """Stops the selected slot's reply; its chat keeps what was written."""
        slot = self.selected_slot
        if slot is None:
            return
        if slot.state == "idle":
            self.notify(f"Slot {slot.id} is idle: there is no reply to stop.")
            return
        self._slots.cancel_slot(slot.id)

    def action_clear_cache(self) -> None:
        """Asks, then makes the engine forget the selected slot's cached KV."""
        slot = self.selected_slot
        if slot is None:
            return
        if slot.used == 0 and slot.state == "idle":
            self.notify(f"Slot {slot.id} holds no tokens: there is nothing to clear.")
            return
        question = f"Slot {slot.id} holds {slot.used} tokens ({format_bytes(slot.kv_bytes_used)} of KV). "
        if slot.label:
            question += (
                f"{slot.label} keeps its text, and its KV moves to the parked store: its next message "
                "gets it back unless the store's budget (park_budget_mb) has evicted it by then."
            )
        else:
            question += "No chat uses it."
        if slot.state != "idle":
            question += " The reply being written is stopped first."
        slot_id = slot.id

        def clear_if_confirmed(yes: bool | None) -> None:
            if yes:
                self._slots.clear_slot(slot_id)
                self.notify(f"Slot {slot_id}'s cache is cleared.")

        self.app.push_screen(ConfirmScreen(f"Clear slot {slot_id}'s cache?", question, "Clear"), clear_if_confirmed)

    def action_show_detail(self) -> None:
        """Shows every field of the selected slot, live."""
        slot = self.selected_slot
        if slot is not None:
            self.app.push_screen(SlotDetailScreen(self._slots.snapshot, slot.id))

    def action_close(self) -> None:
        """Back to the chats."""
        self.dismiss(None)


class SlotDetailScreen(AppModalScreen[None]):
    """Every field of one slot's snapshot, refreshed live."""

    BINDING_GROUP_TITLE = "Slot detail"
    BINDINGS = [Binding("escape,d,enter", "dismiss", "Close", id="slot_detail.close")]
    CSS_PATH = "inspector.tcss"

    def __init__(self, snapshot: Callable[[], EngineSnapshot], slot_id: int) -> None:
        super().__init__()
        self._snapshot = snapshot
        self._slot_id = slot_id

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"Slot {self._slot_id}", classes="detail-title", markup=False)
            yield Static(id="slot-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_detail()
        self.set_interval(REFRESH_S, self.refresh_detail)

    def refresh_detail(self) -> None:
        """Shows the slot as the engine has it now."""
        slot = next((s for s in self._snapshot().slots if s.id == self._slot_id), None)
        detail = self.query_one("#slot-detail", Static)
        detail.update(slot_details(slot) if slot else f"The engine has no slot {self._slot_id} any more.")

"""The slot inspector (F3): every engine slot, live, with keys to go to its chat, stop it, clear it or see it all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Protocol

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from app.confirm import ConfirmScreen
from app.modal_screen import AppModalScreen
from app.usage_bar import usage_bar
from engine.events import EngineSnapshot, SamplingParams, SlotSnapshot
from engine.memory import format_bytes

REFRESH_S = 0.25  # as often as the chats' status lines
BAR_WIDTH = 10
STATE_STYLES = {"idle": "dim", "prefill": "bold yellow", "decoding": "bold green"}

# (column key, heading, numeric): the table's columns, in order; the sampling, longest, goes last.
COLUMNS = (
    ("slot", "Slot", True),
    ("chat", "Chat", False),
    ("state", "State", False),
    ("context", "Tokens used / capacity", False),
    ("prompt", "Prompt", True),
    ("cached", "Cached", True),
    ("generated", "Generated", True),
    ("speed", "tok/s", True),
    ("kv", "KV used / allocated", True),
    ("sampling", "Sampling", False),
)
NUMERIC = {key for key, _, numeric in COLUMNS if numeric}


class SlotEngine(Protocol):
    """What the inspector needs of the engine: the app passes its Engine, a snapshot test a fixed stand-in."""

    def snapshot(self) -> EngineSnapshot: ...

    def cancel(self, slot_id: int) -> None: ...

    def clear(self, slot_id: int) -> None: ...


def sampling_text(sampling: SamplingParams | None) -> str:
    """The sampling parameters of a slot's request in a few characters ("greedy" for temperature 0)."""
    if sampling is None:
        return "–"
    if sampling.temperature == 0:
        return f"greedy max={sampling.max_tokens}"
    parts = [f"t={sampling.temperature:g}"]
    if sampling.top_p < 1:
        parts.append(f"p={sampling.top_p:g}")
    if sampling.top_k:
        parts.append(f"k={sampling.top_k}")
    return " ".join([*parts, f"max={sampling.max_tokens}"])


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
    cells = {
        "slot": _cell(str(slot.id)),
        "chat": _cell(slot.label, "bold") if slot.label else _cell("no chat", "dim italic"),
        "state": _cell(slot.state, STATE_STYLES[slot.state]),
        "context": _cell(f"{bar} {used} / {slot.capacity}"),
        "prompt": _cell(prompt),
        "cached": _cell(str(slot.cached_tokens)),
        "generated": _cell(str(slot.generated)),
        # An idle slot keeps its last reply's speed: shown, but dimmed.
        "speed": _cell(f"{slot.tok_s:.1f}", "dim" if slot.state == "idle" else ""),
        "kv": _cell(f"{format_bytes(slot.kv_bytes_used)} / {format_bytes(slot.kv_bytes_allocated)}"),
        "sampling": _cell(sampling_text(slot.sampling)),
    }
    for key in NUMERIC:
        cells[key].justify = "right"
    return cells


def engine_figures(snapshot: EngineSnapshot) -> Table:
    """The engine-wide figures, as label / value pairs in a grid."""
    grid = Table.grid(padding=(0, 1))
    for _ in range(4):
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(no_wrap=True)
    n = len(snapshot.slots)
    grid.add_row(
        "Model", snapshot.model, "Device", snapshot.device, "BLAS", snapshot.blas, "dtype", snapshot.dtype
    )
    grid.add_row(
        "Weights", format_bytes(snapshot.weights_bytes),
        "KV", f"{format_bytes(snapshot.kv_bytes_used)} used / {format_bytes(snapshot.kv_bytes_allocated)}",
        "Memory", f"{format_bytes(snapshot.active_bytes)} active · {format_bytes(snapshot.peak_bytes)} peak",
        "Speed", f"{snapshot.aggregate_tok_s:.1f} tok/s, all slots",
    )
    grid.add_row("Slots", f"{n} × {snapshot.per_slot} tokens")
    return grid


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
    DEFAULT_CSS = """
    InspectorScreen #inspector-figures { height: auto; padding: 0 1; background: $panel; }
    InspectorScreen SlotTable { height: 1fr; }
    """

    def __init__(self, engine: SlotEngine) -> None:
        super().__init__()
        self._engine = engine
        self._snapshot: EngineSnapshot | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="inspector-figures")
        table = SlotTable(cursor_type="row", zebra_stripes=True)
        for key, heading, numeric in COLUMNS:
            table.add_column(Text(heading, justify="right" if numeric else "left"), key=key)
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_slots()
        self.set_interval(REFRESH_S, self.refresh_slots)

    def refresh_slots(self) -> None:
        """Reads a new snapshot and updates the figures and the rows in place (the cursor stays put)."""
        old, snapshot = self._snapshot, self._engine.snapshot()
        if snapshot == old:  # an idle engine: nothing to redraw
            return
        self._snapshot = snapshot
        self.query_one("#inspector-figures", Static).update(engine_figures(snapshot))
        table = self.query_one(SlotTable)
        if old is None or [s.id for s in old.slots] != [s.id for s in snapshot.slots]:
            # First time, or the engine was re-partitioned: new rows, the cursor on the same line if it still exists.
            row = table.cursor_row
            table.clear()
            for slot in snapshot.slots:
                cells = slot_cells(slot)
                table.add_row(*(cells[key] for key, _, _ in COLUMNS), key=str(slot.id))
            table.move_cursor(row=min(row, len(snapshot.slots) - 1))
            return
        for slot in snapshot.slots:
            for key, cell in slot_cells(slot).items():
                table.update_cell(str(slot.id), key, cell, update_width=True)

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
            self.notify(f"Slot {slot.id} has no chat: ctrl+n opens one on a free slot.", severity="warning")
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
        self._engine.cancel(slot.id)

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
                f"{slot.label} keeps its text: its next message has the whole conversation "
                "read again (prefilled) from the start."
            )
        else:
            question += "No chat uses it."
        if slot.state != "idle":
            question += " The reply being written is stopped first."
        slot_id = slot.id

        def clear_if_confirmed(yes: bool | None) -> None:
            if yes:
                self._engine.clear(slot_id)
                self.notify(f"Slot {slot_id}'s cache is cleared.")

        self.app.push_screen(ConfirmScreen(f"Clear slot {slot_id}'s cache?", question, "Clear"), clear_if_confirmed)

    def action_show_detail(self) -> None:
        """Shows every field of the selected slot, live."""
        slot = self.selected_slot
        if slot is not None:
            self.app.push_screen(SlotDetailScreen(self._engine.snapshot, slot.id))

    def action_close(self) -> None:
        """Back to the chats."""
        self.dismiss(None)


class SlotDetailScreen(AppModalScreen[None]):
    """Every field of one slot's snapshot, refreshed live."""

    BINDING_GROUP_TITLE = "Slot detail"
    BINDINGS = [Binding("escape,d,enter", "dismiss", "Close", id="slot_detail.close")]
    DEFAULT_CSS = """
    SlotDetailScreen { align: center middle; }
    SlotDetailScreen > Vertical {
        width: 64; max-width: 100%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    SlotDetailScreen .detail-title { text-style: bold; margin-bottom: 1; }
    """

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

"""The mlxchat App: loads the model, then holds one tab per chat, each bound to one engine slot."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import App, ComposeResult, InvalidThemeError, SystemCommand
from textual.screen import Screen
from textual.widgets import Footer, Header, TabbedContent

from app import keys
from app.chat_pane import ChatPane
from app.config import Settings
from app.engine_bridge import EngineReady, LoadProgress, StartFailed, StartFailure, start_engine
from app.inspector import InspectorScreen
from app.loading_screen import LoadingScreen
from engine.events import SamplingParams
from engine.slot_plan import SlotPlan
from themes import DEFAULT_THEME, THEMES

if TYPE_CHECKING:
    from engine.scheduler import Engine

STATUS_INTERVAL_S = 0.25  # how often the panes' status lines read the engine's snapshot
EXIT_FAILED = 1


class ChatApp(App[int]):
    """Several chats at once with one local model: tabs of chats over the engine's slots."""

    TITLE = "mlxchat"
    BINDINGS = keys.bindings()
    CSS = """
    #chats { height: 1fr; }
    #chats > ContentSwitcher { height: 1fr; }
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        for theme in THEMES:
            self.register_theme(theme)
        self.engine: Engine | None = None
        self.plan: SlotPlan | None = None
        self.failed = False
        self._chat_numbers = itertools.count(1)
        s = settings.sampling
        self._sampling = SamplingParams(
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=s.max_tokens, seed=s.seed
        )

    def compose(self) -> ComposeResult:
        yield Header()
        yield TabbedContent(id="chats")
        yield Footer()

    def on_mount(self) -> None:
        self._apply_theme(self.settings.theme)
        self.push_screen(LoadingScreen(self.settings.model or "the default model (SmolLM2-135M-Instruct)"))
        self._start()

    def _apply_theme(self, name: str) -> None:
        try:
            self.theme = name
        except InvalidThemeError:
            self.theme = DEFAULT_THEME
            known = ", ".join(t.name for t in THEMES)
            self.notify(f"Unknown theme {name!r} in the settings: using {DEFAULT_THEME} (ours: {known})",
                        severity="warning")

    @work(thread=True, exclusive=True, exit_on_error=False, group="start")
    def _start(self) -> None:
        """Loads the model and starts the engine off the UI thread, reporting through messages."""
        try:
            engine, plan, name, warnings = start_engine(self.settings, lambda p: self.post_message(LoadProgress(p)))
        except StartFailure as exc:
            self.post_message(StartFailed(exc.problem, exc.remedy))
            return
        except Exception as exc:  # anything else unexpected still deserves words rather than a traceback
            self.post_message(StartFailed(f"{type(exc).__name__}: {exc}", "Run `mlxchat doctor` to check the set-up."))
            return
        if not self.post_message(EngineReady(engine, plan, name, warnings)):
            # The app closed while the model loaded: nobody else will stop this engine.
            engine.shutdown()

    @on(LoadProgress)
    def _on_progress(self, event: LoadProgress) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.show_progress(event.progress)

    @on(StartFailed)
    def _on_failed(self, event: StartFailed) -> None:
        self.failed = True
        if isinstance(self.screen, LoadingScreen):
            self.screen.show_failure(event.problem, event.remedy)

    @on(EngineReady)
    async def _on_ready(self, event: EngineReady) -> None:
        self.engine, self.plan = event.engine, event.plan
        self.sub_title = f"{event.model_name} · {event.plan.summary}"
        if isinstance(self.screen, LoadingScreen):
            self.pop_screen()
        for warning in event.warnings:
            self.notify(warning, severity="warning", timeout=10)
        await self.action_new_chat()
        self.set_interval(STATUS_INTERVAL_S, self._refresh_status)
        self.refresh_bindings()

    @property
    def chat_panes(self) -> list[ChatPane]:
        """The open chats, in tab order."""
        return list(self.query_one("#chats", TabbedContent).query(ChatPane))

    @property
    def active_chat(self) -> ChatPane | None:
        """The chat whose tab is shown."""
        pane = self.query_one("#chats", TabbedContent).active_pane
        return pane if isinstance(pane, ChatPane) else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Chat actions exist only once the engine runs (they stay out of the loading screen's footer)."""
        if action in ("new_chat", "close_chat", "stop_reply", "goto_chat", "inspector"):
            return self.engine is not None and not isinstance(self.screen, LoadingScreen)
        return True

    async def action_new_chat(self) -> None:
        """Opens a chat on the lowest free slot, or says that every slot is taken."""
        engine, plan = self.engine, self.plan
        if engine is None or plan is None:
            return
        used = {pane.slot_id for pane in self.chat_panes}
        free = [slot for slot in range(plan.parallel) if slot not in used]
        if not free:
            self.notify(
                f"All {plan.parallel} slots are in use: close a chat (ctrl+w) first, "
                "or start mlxchat with more slots (--parallel).",
                severity="warning",
            )
            return
        number = next(self._chat_numbers)
        pane = ChatPane(f"chat-{number}", f"Chat {number}", free[0], engine, self._sampling,
                        self.settings.system_prompt)
        tabs = self.query_one("#chats", TabbedContent)
        await tabs.add_pane(pane)
        engine.bind(pane.slot_id, pane.chat_title)
        tabs.active = pane.id or ""
        pane.focus_input()

    async def action_close_chat(self) -> None:
        """Closes the shown chat and frees its slot (its reply, if any, is stopped)."""
        pane = self.active_chat
        if pane is None or self.engine is None:
            return
        self.engine.clear(pane.slot_id)
        self.engine.bind(pane.slot_id, None)
        await self.query_one("#chats", TabbedContent).remove_pane(pane.id or "")
        if self.active_chat is not None:
            self.active_chat.focus_input()
        else:
            self.notify("No chat is open: ctrl+n starts one.")

    def action_goto_chat(self, number: int) -> None:
        """Shows chat `number` (1-based, in tab order)."""
        panes = self.chat_panes
        if 1 <= number <= len(panes):
            self._show_chat(panes[number - 1])

    def _show_chat(self, pane: ChatPane) -> None:
        self.query_one("#chats", TabbedContent).active = pane.id or ""
        pane.focus_input()

    def action_inspector(self) -> None:
        """Opens the slot inspector, or closes it when it is shown."""
        if isinstance(self.screen, InspectorScreen):
            self.screen.dismiss(None)
        elif self.engine is not None:
            self.push_screen(InspectorScreen(self.engine), self._show_slot_chat)

    def _show_slot_chat(self, slot_id: int | None) -> None:
        """Shows the chat of the slot the inspector closed on (None: the inspector was just closed)."""
        if slot_id is None:
            return
        pane = next((p for p in self.chat_panes if p.slot_id == slot_id), None)
        if pane is None:  # closed while the inspector was open
            self.notify(f"Slot {slot_id} has no chat any more.", severity="warning")
            return
        self._show_chat(pane)

    def action_stop_reply(self) -> None:
        """Stops the shown chat's reply; what was written stays, marked as stopped."""
        pane = self.active_chat
        if pane is not None:
            pane.stop_reply()

    def action_quit(self) -> None:
        """Quits; the exit status says whether start-up had failed."""
        self.exit(return_code=EXIT_FAILED if self.failed else 0)

    @on(TabbedContent.TabActivated)
    def _on_tab(self, event: TabbedContent.TabActivated) -> None:
        if isinstance(event.pane, ChatPane):
            event.pane.focus_input()

    def _refresh_status(self) -> None:
        if self.engine is None:
            return
        slots = self.engine.snapshot().slots
        for pane in self.chat_panes:
            if pane.slot_id < len(slots):
                pane.show_slot(slots[pane.slot_id])

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette: Textual's own commands plus every action of the key registry."""
        yield from super().get_system_commands(screen)
        for action in keys.palette_actions():
            yield SystemCommand(action.description, action.help, partial(self.run_action, action.action))

    def shutdown_engine(self) -> None:
        """Stops the engine thread (idempotent); replies still running end as cancelled."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()

    def on_unmount(self) -> None:
        self.shutdown_engine()

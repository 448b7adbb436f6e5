"""The mlxchat App: loads the model, then holds one tab per chat, each bound to one engine slot."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events, on, work
from textual.app import App, ComposeResult, InvalidThemeError, SystemCommand
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import ContentSwitcher, Footer, Header, TabbedContent

from app import keys
from app.chat_export import to_markdown
from app.chat_list import ChatListScreen
from app.chat_pane import INPUT_KEYS, ChatPane
from app.chat_settings import ChatSettings, ChatSettingsScreen
from app.chat_store import Chat, ChatStore, StoreError, StoreWriteError
from app.confirm import ConfirmScreen
from app.config import ConfigError, Settings, save_settings
from app.engine_bridge import EngineReady, LoadProgress, ModelFacts, StartFailed, StartFailure, start_engine
from app.help_screen import HelpScreen, HelpSection, bindings_section
from app.inspector import InspectorScreen, SlotTable
from app.loading_screen import LoadingScreen
from app.reply_frames import ReplyFrames
from app.slider import Slider
from app.slots_screen import SlotsScreen, assign_slots
from engine.events import SamplingParams
from engine.slot_plan import SlotPlan
from themes import DEFAULT_THEME, THEMES

if TYPE_CHECKING:
    from engine.scheduler import Engine

STATUS_INTERVAL_S = 0.25  # how often the panes' status lines read the engine's snapshot
EXIT_FAILED = 1
CHAT_ACTIONS = frozenset({
    "new_chat", "close_chat", "stop_reply", "goto_chat", "cycle_chat", "toggle_grid",
    "regenerate", "edit_last", "copy_reply", "export_chat", "chat_list", "chat_settings",
})
SCREEN_ACTIONS = frozenset({"slots", "inspector"})  # screens over the chats, reachable from the help too


class ChatApp(App[int]):
    """Several chats at once with one local model: tabs of chats over the engine's slots."""

    TITLE = "mlxchat"
    BINDINGS = keys.bindings()
    CSS = """
    #chats { height: 1fr; }
    #chats > ContentSwitcher { height: 1fr; }
    #chats.-grid > ContentSwitcher { layout: grid; grid-size: 2; grid-gutter: 0 1; }
    #chats.-grid ChatPane { border: round $panel-lighten-2; border-title-color: $text-muted; }
    #chats.-grid ChatPane:focus-within { border: round $primary; border-title-color: $text; }
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        for theme in THEMES:
            self.register_theme(theme)
        self.engine: Engine | None = None
        self.plan: SlotPlan | None = None
        self.model_facts: ModelFacts | None = None  # what the slots screen re-evaluates plans with
        self._model_name = ""
        self.failed = False
        self.store: ChatStore | None = None
        self._chat_numbers = itertools.count(1)
        self._frames = ReplyFrames(self, lambda: self.chat_panes, self._show_slots)
        s = settings.sampling
        self.sampling = SamplingParams(  # what new chats start with
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=s.max_tokens, seed=s.seed
        )

    def compose(self) -> ComposeResult:
        yield Header()
        yield TabbedContent(id="chats")
        yield Footer()

    def on_mount(self) -> None:
        self.set_keymap(self.settings.keys)
        self._apply_theme(self.settings.theme)
        self.theme_changed_signal.subscribe(self, self._save_theme)
        self._open_store()
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

    def _save_theme(self, theme: object) -> None:
        """Keeps a theme picked from the palette for the next start, in the user's config file."""
        name = getattr(theme, "name", None)
        path = self.settings.config_file
        if name is None or path is None or name == self.settings.theme:
            return
        try:
            save_settings({"theme": name}, path)
        except (ConfigError, OSError) as exc:
            self.notify(f"The theme {name!r} could not be saved to {path}: {exc}", severity="warning")
            return
        self.settings = self.settings.model_copy(update={"theme": name})

    def _open_store(self) -> None:
        """Opens the chat database; without one the app still runs, saying that chats will not be kept."""
        try:
            self.store, notice = ChatStore.open_for_app()
        except StoreError as exc:
            self.notify(f"Chats will not be saved: {exc}", severity="error", timeout=30)
            return
        if notice is not None:
            self.notify(notice, severity="warning", timeout=30)

    @work(thread=True, exclusive=True, exit_on_error=False, group="start")
    def _start(self) -> None:
        """Loads the model and starts the engine off the UI thread, reporting through messages."""
        try:
            engine, plan, name, warnings, facts = start_engine(
                self.settings, lambda p: self.post_message(LoadProgress(p))
            )
        except StartFailure as exc:
            self.post_message(StartFailed(exc.problem, exc.remedy))
            return
        except Exception as exc:  # anything else unexpected still deserves words rather than a traceback
            self.post_message(StartFailed(f"{type(exc).__name__}: {exc}", "Run `mlxchat doctor` to check the set-up."))
            return
        if not self.post_message(EngineReady(engine, plan, name, warnings, facts)):
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
        self.engine, self.plan, self.model_facts = event.engine, event.plan, event.facts
        self._model_name = event.model_name
        self.sub_title = f"{event.model_name} · {event.plan.summary}"
        if isinstance(self.screen, LoadingScreen):
            self.pop_screen()
        for warning in event.warnings:
            self.notify(warning, severity="warning", timeout=10)
        await self._restore_chats()
        self.set_interval(STATUS_INTERVAL_S, self._refresh_status)
        self.refresh_bindings()

    @property
    def chat_panes(self) -> list[ChatPane]:
        """The open chats, in tab order (none once the app is being torn down)."""
        # The switcher's own children: a query of the whole tree would visit every block of every
        # reply, and the reply frames ask up to 30 times a second.
        try:
            switcher = self.query_one("#chats", TabbedContent).query_children(ContentSwitcher).first()
        except NoMatches:
            return []
        return [pane for pane in switcher.children if isinstance(pane, ChatPane)]

    @property
    def active_chat(self) -> ChatPane | None:
        """The chat whose tab is shown."""
        # By id, not active_pane: right after a close the active id can still name the removed pane.
        active = self.query_one("#chats", TabbedContent).active
        return next((pane for pane in self.chat_panes if pane.id == active), None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Chat actions exist on the chats' screen once the engine runs; the F-keys' screens from any screen."""
        if action in CHAT_ACTIONS:
            return self.engine is not None and len(self.screen_stack) == 1
        if action in SCREEN_ACTIONS:
            return self.engine is not None and not isinstance(self.screen, LoadingScreen)
        if action == "help":
            return not isinstance(self.screen, LoadingScreen)
        return True

    async def _restore_chats(self) -> None:
        """Reopens the chats that were open when mlxchat last stopped (tabs, order, focus), or a new one."""
        chats, focused = self.store.open_chats() if self.store is not None else ([], None)
        assert self.plan is not None
        # Their slots start empty: each chat's KV is rebuilt by prefill on its next turn.
        kept = chats[: self.plan.parallel]
        if len(chats) > len(kept):
            self.notify(f"{len(chats) - len(kept)} of the chats that were open did not get a slot "
                        f"({self.plan.parallel} slots) and stay closed.", severity="warning", timeout=10)
        panes = [pane for pane in [await self.open_chat(chat, show=False) for chat in kept] if pane is not None]
        if not panes:
            await self.action_new_chat()
            return
        self._show_chat(next((pane for pane in panes if pane.chat.id == focused), panes[0]))
        self._record_open_chats()

    async def action_new_chat(self) -> None:
        """Opens a new chat with the configured system prompt and sampling."""
        await self.open_chat(Chat(None, model=self._model_name, system_prompt=self.settings.system_prompt,
                                  sampling=self.sampling))

    async def open_chat(self, chat: Chat, show: bool = True) -> ChatPane | None:
        """Opens `chat` in a new tab (shown, unless `show` is False) on the lowest free slot.

        Says so and returns None when every slot is taken.
        """
        engine, plan = self.engine, self.plan
        if engine is None or plan is None:
            return None
        used = {pane.slot_id for pane in self.chat_panes}
        free = [slot for slot in range(plan.parallel) if slot not in used]
        if not free:
            question = (f"All {plan.parallel} slots are in use, so this chat has none to run on. Close a chat "
                        "(ctrl+w), or add slots on the slots screen: open it now?")
            self.push_screen(ConfirmScreen("No free slot", question, "Slots (F2)"),
                             lambda yes: self.action_slots() if yes else None)
            return None
        pane = ChatPane(next(self._chat_numbers), chat, free[0], engine, self.store, self._frames)
        tabs = self.query_one("#chats", TabbedContent)
        await tabs.add_pane(pane)
        engine.bind(pane.slot_id, pane.chat_title)
        if show:
            self._show_chat(pane)
        return pane

    def _record_open_chats(self) -> None:
        """Saves which chats are open, in tab order, and which one is shown, for the next launch."""
        if self.store is None or self.engine is None:
            return
        ids = [pane.chat.id for pane in self.chat_panes if pane.chat.id is not None]
        active = self.active_chat
        try:
            self.store.set_open(ids, active.chat.id if active is not None else None)
        except StoreWriteError as exc:
            self.notify(str(exc), severity="error")

    @on(ChatPane.Retitled)
    def _on_retitled(self, event: ChatPane.Retitled) -> None:
        self._show_title(event.pane)
        self._record_open_chats()

    def _show_title(self, pane: ChatPane) -> None:
        """Names the pane's tab and slot after its chat's title."""
        self.query_one("#chats", TabbedContent).get_tab(pane.id or "").label = pane.chat_title
        if self.engine is not None and pane.slot_id is not None:  # a chat waiting for a slot has none to name
            self.engine.bind(pane.slot_id, pane.chat_title)

    def _pane_of(self, chat_id: int) -> ChatPane | None:
        """The open pane of saved chat `chat_id`, if it is open."""
        return next((pane for pane in self.chat_panes if pane.chat.id == chat_id), None)

    def action_chat_list(self) -> None:
        """Shows the saved chats, to reopen, search, rename or delete them."""
        if self.store is None:
            self.notify("Chats are not being saved in this session: there is no list to show.", severity="error")
            return
        self.push_screen(ChatListScreen(self.store), self._open_saved)

    async def _open_saved(self, chat_id: int | None) -> None:
        """Shows saved chat `chat_id`: its tab if it is open, else a new tab on a free slot."""
        if chat_id is None or self.store is None:
            return
        pane = self._pane_of(chat_id)
        if pane is not None:
            self._show_chat(pane)
            return
        chat = self.store.load(chat_id)
        if chat is None:
            self.notify(f"Chat {chat_id} is no longer saved.", severity="warning")
            return
        if await self.open_chat(chat) is not None:
            self._record_open_chats()

    @on(ChatListScreen.Renamed)
    def _on_renamed(self, event: ChatListScreen.Renamed) -> None:
        pane = self._pane_of(event.chat_id)
        if pane is not None:
            pane.chat.title = event.title
            self._show_title(pane)

    async def action_close_chat(self) -> None:
        """Closes the shown chat and frees its slot (its reply, if any, is stopped)."""
        if self.active_chat is not None:
            await self.close_chat(self.active_chat)

    async def close_chat(self, pane: ChatPane) -> None:
        """Closes `pane` and frees its slot (its reply, if any, is stopped)."""
        if self.engine is None:
            return
        if pane.slot_id is not None:
            self.engine.clear(pane.slot_id)
            self.engine.bind(pane.slot_id, None)
        pane.save_reply("cancelled")
        await self.query_one("#chats", TabbedContent).remove_pane(pane.id or "")
        self._record_open_chats()
        await self._seat_chats()
        self._lay_out_chats()
        if self.active_chat is not None:
            self.active_chat.focus_input()
        elif self.chat_panes:
            self.action_goto_chat(1)
        else:
            self.notify("No chat is open: ctrl+n starts one.")

    def action_slots(self) -> None:
        """Opens the slots screen (the number of slots and the total context, applied only on request),
        or closes it when it is shown."""
        if isinstance(self.screen, SlotsScreen):
            self.screen.action_cancel()
        elif self.model_facts is not None:
            self.push_screen(SlotsScreen())

    async def adopt_plan(self, plan: SlotPlan, survived: Mapping[int, bool]) -> None:
        """Takes the plan the engine was re-partitioned to; every chat is told what became of its slot."""
        self.plan = plan
        self.sub_title = f"{self._model_name} · {plan.summary}"
        await self._seat_chats(survived)

    async def _seat_chats(self, survived: Mapping[int, bool] | None = None) -> None:
        """Binds the chats to the plan's slots: each keeps its slot while it exists, chats without one take
        free slots in tab order. `survived` (after a re-partition) says whose KV cache the engine kept;
        without it only the chats that move are told."""
        if self.engine is None or self.plan is None:
            return
        panes = self.chat_panes
        for pane, slot in zip(panes, assign_slots([p.slot_id for p in panes], self.plan.parallel)):
            if survived is None and slot == pane.slot_id:
                continue
            kept = slot is not None and slot == pane.slot_id and bool(survived and survived.get(slot))
            await pane.move_to_slot(slot, kept)
            if slot is not None:
                self.engine.bind(slot, pane.chat_title)

    def action_goto_chat(self, number: int) -> None:
        """Shows chat `number` (1-based, in tab order)."""
        panes = self.chat_panes
        if 1 <= number <= len(panes):
            self._show_chat(panes[number - 1])

    def _show_chat(self, pane: ChatPane) -> None:
        """Shows `pane`'s tab with the keyboard in its message box."""
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

    def action_cycle_chat(self, step: int) -> None:
        """Shows the chat `step` places after the shown one (negative: before), wrapping around."""
        panes = self.chat_panes
        if panes:
            current = panes.index(self.active_chat) if self.active_chat in panes else 0
            self.action_goto_chat((current + step) % len(panes) + 1)

    def action_toggle_grid(self) -> None:
        """Switches between one chat at a time (tabs) and every chat side by side (grid)."""
        tabs = self.query_one("#chats", TabbedContent)
        tabs.toggle_class("-grid")
        self._lay_out_chats()

    def _lay_out_chats(self) -> None:
        """In the grid every chat is shown: columns for up to 3 rows, and each pane titled."""
        tabs = next(iter(self.query("#chats").results(TabbedContent)), None)
        if tabs is None:  # a tab switch that arrives while the app closes
            return
        grid = tabs.has_class("-grid")
        panes = self.chat_panes
        switcher = tabs.query_one(ContentSwitcher)
        switcher.styles.grid_size_columns = 1 if len(panes) == 1 else 2 if len(panes) <= 4 else 3
        # The id, not active_pane: right after a close the active id may name the pane just removed.
        active = tabs.active
        for pane in panes:
            # The switcher shows only the active pane; the grid overrides it after each switch.
            pane.display = grid or pane.id == active
            pane.border_title = pane.chat_title if grid else None

    def action_help(self) -> None:
        """Shows every key of the app and of its screens, as the user's keymap has them."""
        if isinstance(self.screen, HelpScreen):
            return
        keymap = self.settings.keys
        sections = [
            bindings_section("Everywhere", keys.bindings(), keymap, extra=[keys.goto_help(keymap)]),
            HelpSection("In the message box", INPUT_KEYS),
            bindings_section("Slots screen (F2)", [*SlotsScreen.BINDINGS, *Slider.BINDINGS], keymap,
                             remappable=False),
            bindings_section("Slot inspector (F3)", [*InspectorScreen.BINDINGS, *SlotTable.BINDINGS], keymap,
                             remappable=False),
        ]
        self.push_screen(HelpScreen(sections))

    def action_stop_reply(self) -> None:
        """Stops the shown chat's reply; what was written stays, marked as stopped."""
        pane = self.active_chat
        if pane is not None:
            pane.stop_reply()

    async def action_regenerate(self) -> None:
        """Writes the shown chat's last reply again."""
        if self.active_chat is not None:
            await self.active_chat.regenerate()

    def action_edit_last(self) -> None:
        """Puts the shown chat's last user message back in the input, to edit and send again."""
        if self.active_chat is not None:
            self.active_chat.edit_last()

    def action_copy_reply(self) -> None:
        """Copies the shown chat's last reply to the clipboard."""
        if self.active_chat is not None:
            self.active_chat.copy_reply()

    def action_chat_settings(self) -> None:
        """Edits the shown chat's system prompt and sampling (they apply from its next turn)."""
        pane = self.active_chat
        if pane is None:
            return

        def apply(settings: ChatSettings | None) -> None:
            if settings is not None and pane.is_attached:
                pane.apply_settings(settings)

        self.push_screen(ChatSettingsScreen(pane.chat_title, ChatSettings(pane.chat.system_prompt, pane.chat.sampling)),
                         apply)

    def action_export_chat(self) -> None:
        """Writes the shown chat as Markdown to mlxchat-chat-ID.md in the current folder."""
        pane = self.active_chat
        if pane is None:
            return
        path = Path.cwd() / f"mlxchat-chat-{pane.chat.id if pane.chat.id is not None else 'unsaved'}.md"
        try:
            path.write_text(to_markdown(pane.chat), encoding="utf-8")
        except OSError as exc:
            self.notify(f"Could not export to {path}: {exc.strerror}", severity="error")
            return
        self.notify(f"Exported to {path}")

    def action_quit(self) -> None:
        """Quits, saving the replies being written; the exit status says whether start-up had failed."""
        for pane in self.chat_panes:
            if pane.busy:
                pane.save_reply("cancelled")
        self._record_open_chats()
        self.exit(return_code=EXIT_FAILED if self.failed else 0)

    @on(TabbedContent.TabActivated)
    def _on_tab(self, event: TabbedContent.TabActivated) -> None:
        # A late event for a tab shown earlier must not take the focus back: that would show it again.
        if isinstance(event.pane, ChatPane) and event.pane is self.active_chat:
            event.pane.focus_input()
            self._record_open_chats()
        self._lay_out_chats()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """In the grid, the chat the keyboard is in becomes the shown tab (escape stops its reply)."""
        pane = next((a for a in event.widget.ancestors if isinstance(a, ChatPane)), None)
        # query, not query_one: focus still moves while the app is being torn down.
        for tabs in self.query("#chats").results(TabbedContent):
            if pane is not None and pane.id and tabs.active != pane.id and pane in self.chat_panes:
                try:
                    tabs.active = pane.id
                except ValueError:  # focus passed through a pane whose tab is already gone (closing)
                    pass

    def _refresh_status(self) -> None:
        if not self._frames.running:  # (while replies stream, each of their frames does it)
            self._show_slots()

    def _show_slots(self) -> None:
        """Shows each chat's slot in its status line."""
        if self.engine is None:
            return
        slots = self.engine.snapshot().slots
        for pane in self.chat_panes:
            if pane.slot_id is not None and pane.slot_id < len(slots):
                pane.show_slot(slots[pane.slot_id])

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette: Textual's own commands plus every action of the key registry."""
        yield from super().get_system_commands(screen)
        for action in keys.palette_actions():
            yield SystemCommand(action.description, action.help, partial(self.run_action, action.action))
        if screen is self.screen_stack[0]:
            for number, pane in enumerate(self.chat_panes, 1):
                yield SystemCommand(f"Go to {pane.chat_title}", f"Show the chat on slot {pane.slot_id}",
                                    partial(self.action_goto_chat, number))

    def shutdown_engine(self) -> None:
        """Stops the engine thread (idempotent); replies still running end as cancelled."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()

    def on_unmount(self) -> None:
        self.shutdown_engine()
        if self.store is not None:
            self.store.close()

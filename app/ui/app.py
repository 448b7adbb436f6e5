"""The mlxchat App: loads the model, then holds one tab per chat; the session seats the chats on the engine's slots."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable
from functools import partial
from pathlib import Path

from textual import events, on
from textual.app import App, ComposeResult, SystemCommand
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Header, TabbedContent

from mlxchat.app.chats.chat import Chat
from mlxchat.app.chats.errors import StoreWriteError
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.config.settings import Settings
from mlxchat.app.session.messages import EngineReady, PlanChanged, StartFailed
from mlxchat.app.session.session import Session
from mlxchat.app.ui import keys
from mlxchat.app.ui.workarounds import lazy_strips, line_updates
from mlxchat.app.ui.parts.chat_actions import ChatActions
from mlxchat.app.ui.parts.fan_outs import FanOuts
from mlxchat.app.ui.chat_grid import ChatLabels, lay_out_chats
from mlxchat.app.ui.parts.leaving import ask_before_closing, ask_before_quitting
from mlxchat.app.ui.parts.model_switch import ModelSwitch
from mlxchat.app.ui.parts.palette import palette_commands
from mlxchat.app.ui.reply_frames import ReplyFrames
from mlxchat.app.ui.parts.saved_chats import SavedChats
from mlxchat.app.ui.screens.chat_list import ChatListScreen
from mlxchat.app.ui.screens.help import HelpScreen, app_sections
from mlxchat.app.ui.screens.inspector import InspectorScreen
from mlxchat.app.ui.screens.loading import LoadingScreen
from mlxchat.app.ui.screens.slots import SlotsScreen
from mlxchat.app.ui.screens.too_small import TooSmallScreen, fit_to_terminal
from mlxchat.app.ui.parts.startup import Startup
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.app.ui.parts.kept_settings import apply_theme, keep_setting, save_theme
from mlxchat.engine import EngineSnapshot
from mlxchat.themes import THEMES

STATUS_INTERVAL_S = 0.25  # how often the panes' status lines read the engine's snapshot


class ChatApp(App[int]):
    """Several chats at once with one local model: tabs of chats over the engine's slots.

    It owns its parts (app.ui.parts: its start, its saved chats, its fan-outs, what chats ask of it, ...) and routes
    their messages to them; the chats' state is their Conversations'.
    """

    TITLE = "mlxchat"
    BINDINGS = keys.bindings()
    CSS_PATH = "app.tcss"

    def __init__(self, settings: Settings, db_path: Path | None = None) -> None:
        """`db_path`: where chats are saved (default: the user's data folder)."""
        super().__init__()
        line_updates.install()
        lazy_strips.install()
        self.settings = settings
        for theme in THEMES:
            self.register_theme(theme)
        self.session = Session(self)
        self._failed_status: int | None = None  # the exit status start-up's failure ends the app with
        self.store: ChatStore | None = None
        self.show_timings = settings.show_timings  # each reply's timings line (alt+t, kept for the next start)
        self._chat_numbers = itertools.count(1)
        self._finished_last: str | None = None  # the chat whose reply ended last (goto_finished shows it)
        self._unseen: set[str] = set()  # chats whose reply ended out of view, not shown since
        self.labels = ChatLabels(lambda: self.query_one("#chats", TabbedContent), self.badge)
        self._frames = ReplyFrames(self, lambda: self.chat_panes, self._show_slots, self.session.writing)
        self.sampling = settings.sampling.params()  # what new chats start with
        self.startup = Startup(self, db_path)
        self.saved_chats = SavedChats(self)
        self.fan_outs = FanOuts(self)
        self.chat_actions = ChatActions(self, self.session)
        self.model_switch = ModelSwitch(self)

    @property
    def failed(self) -> bool:
        """Whether start-up failed (the app then only says why and quits)."""
        return self._failed_status is not None

    def compose(self) -> ComposeResult:
        yield Header()
        yield TabbedContent(id="chats")
        yield Footer()

    def on_mount(self) -> None:
        self.set_keymap(self.settings.keys)
        apply_theme(self, self.settings.theme)
        self.theme_changed_signal.subscribe(self, partial(save_theme, self))
        self.startup.open_store()
        loading = LoadingScreen(self.settings.model or "the default model (SmolLM2-135M-Instruct)")
        self.push_screen(loading)
        self.startup.load(loading)

    def on_start_failed(self, event: StartFailed) -> None:
        self._failed_status = event.status
        if isinstance(self.screen, LoadingScreen):
            self.screen.show_failure(event.problem, event.remedy)

    async def on_engine_ready(self, event: EngineReady) -> None:
        self.on_plan_changed()
        if isinstance(self.screen, LoadingScreen):
            self.pop_screen()
        for warning in event.warnings:
            self.notify(warning, severity="warning", timeout=10)
        await self.startup.restore_chats()
        self.set_interval(STATUS_INTERVAL_S, self._refresh_status)
        self.refresh_bindings()
        fit_to_terminal(self, self.size)

    def on_plan_changed(self, event: PlanChanged | None = None) -> None:
        assert self.session.plan is not None  # (the model and the slot plan, under the title)
        self.sub_title = f"{self.session.model_name} · {self.session.plan.summary}"

    @property
    def _chat_tabs(self) -> TabbedContent | None:
        """The chats' tabs (none once the app is being torn down)."""
        # By id, which Textual looks up breadth first and caches: a query of the whole tree would visit every block
        # of every reply (half a millisecond with eight chats), and the reply frames ask up to 30 times a second.
        try:
            return self.query_one("#chats", TabbedContent)
        except NoMatches:
            return None

    @property
    def chat_panes(self) -> list[ChatPane]:
        """The open chats, in tab order (none once the app is being torn down)."""
        tabs = self._chat_tabs
        switcher = None if tabs is None else next(iter(tabs.query_children(ContentSwitcher)), None)
        return [] if switcher is None else [pane for pane in switcher.children if isinstance(pane, ChatPane)]

    @property
    def active_chat(self) -> ChatPane | None:
        """The chat whose tab is shown (none once the app is being torn down)."""
        tabs = self._chat_tabs
        if tabs is None:  # a late tab event while the app closes
            return None
        # By id, not active_pane: right after a close the active id can still name the removed pane.
        return next((pane for pane in self.chat_panes if pane.id == tabs.active), None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """An action runs where its scope in the registry says: a chat's on the chats' screen once the engine
        runs, the slots' and inspector's over any screen; help anywhere but the loading screen; over a terminal
        too small, only quit."""
        if isinstance(self.screen, TooSmallScreen):
            return action == "quit"
        scope = keys.scope_of(action)
        if scope == "chat":
            return self.session.ready and len(self.screen_stack) == 1
        if scope == "screen":
            return self.session.ready and not isinstance(self.screen, LoadingScreen)
        if action == "help":
            return not isinstance(self.screen, LoadingScreen)
        return True

    async def action_new_chat(self) -> None:
        """Opens a new chat with the configured system prompt and sampling."""
        await self.open_chat(Chat(None, model=self.session.model_name, system_prompt=self.settings.system_prompt,
                                  sampling=self.sampling))

    async def open_chat(self, chat: Chat, show: bool = True) -> ChatPane | None:
        """Opens `chat` in a new tab (shown, unless `show` is False), on a free slot if there is one: a chat
        without one borrows a slot when it sends. None before the engine runs."""
        session = self.session
        if session.plan is None:
            return None
        pane = ChatPane(next(self._chat_numbers), chat, session, self.store, self._frames, self.settings.keys)
        pane.set_class(self.show_timings, "-timings")
        session.open_chat(pane.chat_id, pane.chat_title, pane)
        await self.query_one("#chats", TabbedContent).add_pane(pane)
        if show:
            self.show_chat(pane)
        return pane

    def record_open_chats(self) -> None:
        """Saves which chats are open, in tab order, and which one is shown, for the next launch."""
        if self.store is None or not self.session.ready:
            return
        ids = [pane.chat.id for pane in self.chat_panes if pane.chat.id is not None]
        active = self.active_chat
        try:
            self.store.set_open(ids, active.chat.id if active is not None else None)
        except StoreWriteError as exc:
            self.notify(str(exc), severity="error")

    def action_stop_reply(self) -> None:
        """Stops the shown chat's reply (what was written stays), or takes its queued message back."""
        if self.active_chat is not None:
            self.active_chat.stop_reply()

    def action_toggle_timings(self) -> None:
        """Shows or hides every reply's timings line, in every chat (and in chats opened later)."""
        self.show_timings = not self.show_timings
        keep_setting(self, "show_timings", self.show_timings, "Showing the timings")
        for pane in self.chat_panes:
            pane.set_class(self.show_timings, "-timings")

    @on(ChatPane.Retitled)
    def _on_retitled(self, event: ChatPane.Retitled) -> None:
        self.show_title(event.pane)
        self.record_open_chats()

    def show_title(self, pane: ChatPane) -> None:
        """Names the pane's tab and slot after its chat's title, and numbers the tabs of chats titled alike."""
        for shown in self.chat_panes:
            self.labels.show(shown)
        self.session.rename(pane.chat_id, pane.shown_title)

    def badge(self, pane: ChatPane) -> str:
        """The chat's badge: its message waits for a slot (◷), its reply is being written (●), or ended
        out of view and was not seen yet (✓); "" for none."""
        return "◷" if pane.queued else "●" if pane.busy else "✓" if pane.chat_id in self._unseen else ""

    @on(ChatPane.Finished)
    def _on_finished(self, event: ChatPane.Finished) -> None:
        """Remembers the chat whose reply ended last; a chat out of view whose reply ended by itself gets a
        toast and a ✓ badge."""
        pane = event.pane
        self._finished_last = pane.chat_id
        # (a reply stopped by the user, or by a change of slots, is no news)
        if event.reason != "cancelled" and not (pane.display and len(self.screen_stack) == 1):
            self._unseen.add(pane.chat_id)
            key = keys.key_for("goto_finished", self.settings.keys)
            self.notify(f"{pane.chat_title} has finished its reply ({key} shows it).")
        self.labels.show(pane)

    def action_goto_finished(self) -> None:
        """Shows the chat whose reply ended last."""
        pane = next((p for p in self.chat_panes if p.chat_id == self._finished_last), None)
        if pane is None:
            self.notify("No open chat has finished a reply yet.")
            return
        self.show_chat(pane)

    def action_close_chat(self) -> None:
        """Closes the shown chat and frees its slot, asking first when that loses a draft or stops a reply."""
        if self.active_chat is not None:
            ask_before_closing(self, self.active_chat, self.close_chat)

    async def close_chat(self, pane: ChatPane) -> None:
        """Closes `pane` and frees its slot (its reply, if any, is stopped)."""
        if not self.session.ready:
            return
        self.session.close_chat(pane.chat_id)
        self._unseen.discard(pane.chat_id)
        self.labels.forget(pane)
        pane.save_reply("cancelled")
        await self.query_one("#chats", TabbedContent).remove_pane(pane.id or "")
        self.record_open_chats()
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
        elif self.session.ready and self.session.facts is not None:
            self.push_screen(SlotsScreen(self.session, self.settings))
        elif self.session.plan is not None:  # a remote engine: the slots are the server's
            self.notify(f"{self.session.plan.summary}. A llama-server's slots are its --parallel; with other servers, "
                        "parallel in the config sets how many chats answer at once. Neither changes from here.",
                        title="Slots of a remote server", timeout=15)

    def action_goto_chat(self, number: int) -> None:
        """Shows chat `number` (1-based, in tab order)."""
        panes = self.chat_panes
        if 1 <= number <= len(panes):
            self.show_chat(panes[number - 1])

    def show_chat(self, pane: ChatPane) -> None:
        """Shows `pane`'s tab with the keyboard in its message box."""
        # The keyboard first, at once: a chat hidden with the focus in it would hand the focus to
        # one of its own widgets, and its tab would be shown again (a chat picked in the chat list).
        self.screen_stack[0].set_focus(pane.chat_input)
        self.query_one("#chats", TabbedContent).active = pane.id or ""
        pane.focus_input()
        self._seen(pane)

    def _seen(self, pane: ChatPane) -> None:
        """The pane is shown: its ✓ badge goes."""
        if pane.chat_id in self._unseen:
            self._unseen.discard(pane.chat_id)
            self.labels.show(pane)

    def action_inspector(self) -> None:
        """Opens the slot inspector, or closes it when it is shown."""
        if isinstance(self.screen, InspectorScreen):
            self.screen.dismiss(None)
        elif self.session.ready:
            self.push_screen(InspectorScreen(self.session), self._show_slot_chat)

    def _show_slot_chat(self, slot_id: int | None) -> None:
        """Shows the chat of the slot the inspector closed on (None: the inspector was just closed)."""
        if slot_id is None:
            return
        key = self.session.chat_on(slot_id)
        pane = next((p for p in self.chat_panes if p.chat_id == key), None)
        if pane is None:  # closed while the inspector was open
            self.notify(f"Slot {slot_id} has no chat any more.", severity="warning")
            return
        self.show_chat(pane)

    def action_cycle_chat(self, step: int) -> None:
        """Shows the chat `step` places after the shown one (negative: before), wrapping around."""
        panes = self.chat_panes
        if panes:
            current = panes.index(self.active_chat) if self.active_chat in panes else 0
            self.action_goto_chat((current + step) % len(panes) + 1)

    def action_toggle_grid(self) -> None:
        """Switches between one chat at a time (tabs) and every chat side by side (grid)."""
        self.show_grid(not self.labels.grid)

    def show_grid(self, grid: bool) -> None:
        """Every chat side by side (grid), or one at a time (tabs)."""
        self.labels.grid = grid
        self.query_one("#chats", TabbedContent).set_class(grid, "-grid")
        self._lay_out_chats()

    def action_chat_list(self) -> None:
        """Shows the saved chats, to reopen, search, rename or delete them."""
        self.saved_chats.show_list()

    def on_chat_list_screen_renamed(self, event: ChatListScreen.Renamed) -> None:
        self.saved_chats.renamed(event)

    async def on_chat_pane_forked(self, event: ChatPane.Forked) -> None:
        await self.saved_chats.open_fork(event)

    def on_chat_pane_asked(self, event: ChatPane.Asked) -> None:
        self.chat_actions.run(event)

    def action_pick_model(self) -> None:
        """Opens the model picker: another model, loaded while the chats stay open."""
        self.model_switch.pick()

    def action_fan_out(self) -> None:
        """Opens the fan-out form: one prompt to several new chats with different settings."""
        self.fan_outs.start()

    def action_keep_variant(self) -> None:
        """Keeps the shown fan-out chat as a chat of its own; its siblings close, after a confirmation."""
        self.fan_outs.keep_variant()

    def _lay_out_chats(self) -> None:
        tabs = self._chat_tabs
        if tabs is not None:  # (none for a tab switch that arrives while the app closes)
            panes = self.chat_panes
            lay_out_chats(tabs, panes)
            self.labels.laid_out(panes)

    def action_help(self) -> None:
        """Shows every key of the app and of its screens, as the user's keymap has them."""
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(app_sections(self.settings.keys)))

    def action_quit(self) -> None:
        """Quits, asking first while replies are written (saved as they are); exit status 0, or start-up's failure."""
        ask_before_quitting(self, self.chat_panes, self.settings.confirm_quit, self._quit)

    def _quit(self) -> None:
        for pane in self.chat_panes:
            pane.conversation.keep_draft(pane.chat_input.text)
            if pane.busy:
                pane.save_reply("cancelled")
        self.record_open_chats()
        self.exit(return_code=self._failed_status or 0)

    @on(TabbedContent.TabActivated)
    def _on_tab(self, event: TabbedContent.TabActivated) -> None:
        # A late event for a tab shown earlier must not take the focus back: that would show it again. Nor from
        # another chat shown in the grid: the focus went there after this tab was shown, and it is on its way to
        # make that chat the shown tab (two such moves in flight bounced the focus between two chats for good).
        typing_in = self._chat_of(self.focused) if self.screen_stack else None  # (none while the app closes)
        if isinstance(event.pane, ChatPane) and event.pane is self.active_chat and (
            typing_in is None or typing_in is event.pane or not typing_in.display
        ):
            event.pane.focus_input()
            self._seen(event.pane)
            self.record_open_chats()
        self._lay_out_chats()

    @staticmethod
    def _chat_of(widget: Widget | None) -> ChatPane | None:
        """The chat `widget` is in, if any."""
        return None if widget is None else next((a for a in widget.ancestors if isinstance(a, ChatPane)), None)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """In the grid, the chat the keyboard is in becomes the shown tab (escape stops its reply)."""
        pane = self._chat_of(event.widget)
        # query, not query_one: focus still moves while the app is being torn down.
        for tabs in self.query("#chats").results(TabbedContent):
            if pane is not None and pane.id and tabs.active != pane.id and pane in self.chat_panes:
                try:
                    tabs.active = pane.id
                except ValueError:  # focus passed through a pane whose tab is already gone (closing)
                    pass

    def _refresh_status(self) -> None:
        # While replies stream, each frame redraws the lines of the chats it repaints: every other one and every badge
        # is redrawn here. One snapshot serves them and the saved KV's notes (the engine waits while one is taken).
        if self.session.ready:
            snapshot = self.session.snapshot()
            self._show_slots(() if self._frames.running else self.chat_panes, snapshot)
            self.startup.say_disk_notes(snapshot.disk_notes)

    def _show_slots(self, answering: Collection[ChatPane], snapshot: EngineSnapshot | None = None) -> None:
        """Shows each chat's badge in its tab, and its slot in its status line: every idle chat's, and of the
        chats answering those in `answering` (a frame's: the chats it repaints)."""
        if not self.session.ready:
            return
        slots = (snapshot or self.session.snapshot()).slots
        for pane in self.chat_panes:
            self.labels.show(pane)
            if pane.busy and pane not in answering:
                continue
            if pane.slot_id is not None and pane.slot_id < len(slots) and not pane.queued:
                pane.show_slot(slots[pane.slot_id])

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette: Textual's own commands plus every action of the key registry."""
        yield from super().get_system_commands(screen)
        yield from palette_commands(self, screen)

    def on_resize(self, event: events.Resize) -> None:
        if not isinstance(self.screen, LoadingScreen):  # (its one box fits any terminal; checked once it goes)
            fit_to_terminal(self, event.size)

    def on_unmount(self) -> None:
        self._frames.stop()
        self.session.shutdown()
        if self.store is not None:
            self.store.close()

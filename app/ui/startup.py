"""ChatApp's start: the chat database, the model loaded off the UI thread, then the chats that were open."""

from __future__ import annotations

from textual import work

from mlxchat.app.chats.errors import StoreError, StoreWriteError
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.chats.tabs import KEEP_ALIVE_S
from mlxchat.app.exit_codes import EXIT_FAILURE
from mlxchat.app.session.messages import EngineReady, LoadProgress, PlanChanged, StartFailed
from mlxchat.app.session.start import StartFailure
from mlxchat.app.ui.screens.loading import LoadingScreen
from mlxchat.engine import release_thread_streams
from mlxchat.app.ui.parts import AppPart

STATUS_INTERVAL_S = 0.25  # how often the panes' status lines read the engine's snapshot


class Startup(AppPart):
    """ChatApp's start-up (a mixin: ChatApp is what it runs on)."""

    def _open_store(self) -> None:
        """Opens the chat database; without one the app still runs, saying that chats will not be kept."""
        try:
            self.store, notice = ChatStore.open_for_app(self._db_path)
        except StoreError as exc:
            self.notify(f"Chats will not be saved: {exc}", severity="error", timeout=30)
            return
        if notice is not None:
            self.notify(notice, severity="warning", timeout=30)

    @work(thread=True, exclusive=True, exit_on_error=False, group="start")
    def _start(self) -> None:
        """Loads the model and starts the engine off the UI thread, reporting through messages."""
        try:
            warnings = self.session.start(self.settings, lambda p: self.post_message(LoadProgress(p)))
        except StartFailure as exc:
            self.post_message(StartFailed(exc.problem, exc.remedy, exc.status))
            return
        except Exception as exc:  # anything else unexpected still deserves words rather than a traceback
            self.post_message(StartFailed(f"{type(exc).__name__}: {exc}", "Run `mlxchat doctor` to check the set-up.",
                                          EXIT_FAILURE))
            return
        finally:  # (this thread, which loaded the model, ends here)
            release_thread_streams()
        if not self.post_message(EngineReady(warnings)):
            # The app closed while the model loaded: nobody else will stop this engine.
            self.session.shutdown()

    # Handlers by name (on_<message>), not @on: Textual collects @on handlers only from a MessagePump's own class.
    def on_load_progress(self, event: LoadProgress) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.show_progress(event.progress)

    def on_start_failed(self, event: StartFailed) -> None:
        self._failed_status = event.status
        if isinstance(self.screen, LoadingScreen):
            self.screen.show_failure(event.problem, event.remedy)

    async def on_engine_ready(self, event: EngineReady) -> None:
        self._show_plan()
        if isinstance(self.screen, LoadingScreen):
            self.pop_screen()
        for warning in event.warnings:
            self.notify(warning, severity="warning", timeout=10)
        await self._restore_chats()
        self.set_interval(STATUS_INTERVAL_S, self._refresh_status)
        self.set_interval(STATUS_INTERVAL_S, self._say_disk_notes)
        self.refresh_bindings()

    def _say_disk_notes(self) -> None:
        """Says once each saved KV file the engine ignored and removed (damaged, another model's)."""
        notes = self.session.snapshot().disk_notes if self.session.ready else ()
        for note in notes[self._disk_notes_said :]:
            self.notify(f"Saved KV: {note}", severity="warning", timeout=10)
        self._disk_notes_said = max(self._disk_notes_said, len(notes))

    def _show_plan(self) -> None:
        assert self.session.plan is not None
        self.sub_title = f"{self.session.model_name} · {self.session.plan.summary}"

    def on_plan_changed(self, event: PlanChanged) -> None:
        self._show_plan()

    async def _restore_chats(self) -> None:
        """Reopens the chats that were open when mlxchat last stopped (tabs, order, focus), or a new one."""
        chats, focused = [], None
        if self.store is not None:
            try:  # the tabs of mlxchats that ended; those of one still running stay its own
                chats, focused = self.store.claim_open_chats()
            except StoreWriteError as exc:
                self.notify(f"The chats that were open cannot be reopened: {exc}", severity="error")
            self.set_interval(KEEP_ALIVE_S, self._keep_alive)
        # The first chats take the free slots, empty: each chat's KV is rebuilt by prefill on its next turn.
        panes = [pane for pane in [await self.open_chat(chat, show=False) for chat in chats] if pane is not None]
        if not panes:
            await self.action_new_chat()
            return
        self._show_chat(next((pane for pane in panes if pane.chat.id == focused), panes[0]))
        self._record_open_chats()

    def _keep_alive(self) -> None:
        """Tells other mlxchats on the database that this one runs, so that none takes its tabs."""
        if self.store is not None:
            try:
                self.store.keep_alive()
            except StoreWriteError:
                pass  # saving shows its own problem; past the lease a launch may reopen these tabs too

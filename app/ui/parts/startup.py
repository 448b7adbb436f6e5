"""The app's start: the chat database, the model loaded off the UI thread, then the chats that were open."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from mlxchat.app.chats.errors import StoreError, StoreWriteError
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.chats.tabs import KEEP_ALIVE_S
from mlxchat.app.session.messages import EngineReady, LoadProgress, StartFailed
from mlxchat.app.session.start import StartFailure
from mlxchat.app.tools.listing import notice
from mlxchat.app.ui.parts.chat_host import ChatHost
from mlxchat.app.ui.screens.loading import LoadingScreen
from mlxchat.app.ui.parts.server_notes import watch_servers
from mlxchat.engine import StartedEngine

LISTING_CHECK_S = 0.5  # how often the app looks whether the servers have started and their listing was said
DRAFTS_EVERY_S = 5.0  # how often the chats' drafts are kept while mlxchat runs (and at quit)


class Startup:
    """Opens the chat database, loads the model on a worker thread (its progress goes to the loading screen,
    its end to the app as StartFailed or EngineReady), then reopens the chats that were open; the app owns one."""

    def __init__(self, app: ChatHost, db_path: Path | None) -> None:
        self.app = app
        self._db_path = db_path
        self._disk_notes_said = 0  # saved KV notes already shown
        self._listing_said_for: object = None  # the engine whose tool listing was last looked at (a switch: again)

    def open_store(self) -> None:
        """Opens the chat database; without one the app still runs, saying that chats will not be kept."""
        try:
            self.app.store, notice = ChatStore.open_for_app(self._db_path)
        except StoreError as exc:
            self.app.notify(f"Chats will not be saved: {exc}", severity="error", timeout=30)
            return
        if notice is not None:
            self.app.notify(notice, severity="warning", timeout=30)

    def load(self, screen: LoadingScreen) -> None:
        """Starts the engine off the UI thread, its progress shown on `screen`, and the MCP servers in the
        background (a server that fails is named; the chats go on without its tools)."""
        servers = self.app.session.tools.start(self.app.settings)
        watch_servers(self.app, servers)
        if servers.states():
            self.app.set_interval(LISTING_CHECK_S, self._say_listing)
        loading = self.app.session.load_in_background(self.app.settings,
                                                      lambda p: screen.post_message(LoadProgress(p)))
        loading.add_done_callback(self._loaded)

    def _loaded(self, loading: Future[StartedEngine]) -> None:
        """The engine started, or why not (on the loading thread): the session takes it, the app hears through
        messages."""
        app = self.app
        try:
            warnings = app.session.start(loading.result(), app.settings)
        except StartFailure as exc:
            app.post_message(StartFailed(exc.problem, exc.remedy, exc.status))
            return
        if not app.post_message(EngineReady(warnings)):
            # The app closed while the model loaded: nobody else will stop this engine.
            app.session.shutdown()

    def _say_listing(self) -> None:
        """Once the servers have started, and again after a model switch: says where a chat's tool listing would not
        fit the slot, and what is done about it."""
        session = self.app.session
        servers = session.tools.servers
        if session.engine is None or session.engine is self._listing_said_for or session.plan is None or (
                servers is None or not servers.settled(0)):
            return
        self._listing_said_for = session.engine
        said = notice(session.tools.listing(), session.plan.per_slot)
        if said is not None:
            self.app.notify(said, severity="warning", timeout=20)

    def say_disk_notes(self, notes: tuple[str, ...]) -> None:
        """Says once each saved KV file the engine ignored and removed (damaged, another model's): `notes`, the
        engine's snapshot's."""
        app = self.app
        for note in notes[self._disk_notes_said :]:
            app.notify(f"Saved KV: {note}", severity="warning", timeout=10)
        self._disk_notes_said = max(self._disk_notes_said, len(notes))

    async def restore_chats(self) -> None:
        """Reopens the chats that were open when mlxchat last stopped (tabs, order, focus), or a new one."""
        app = self.app
        chats, focused = [], None
        if app.store is not None:
            try:  # the tabs of mlxchats that ended; those of one still running stay its own
                chats, focused = app.store.claim_open_chats()
            except StoreWriteError as exc:
                app.notify(f"The chats that were open cannot be reopened: {exc}", severity="error")
            app.set_interval(KEEP_ALIVE_S, self._keep_alive)
            app.set_interval(DRAFTS_EVERY_S, self.keep_drafts)
        # The first chats take the free slots, empty: each chat's KV is rebuilt by prefill on its next turn.
        panes = [pane for pane in [await app.open_chat(chat, show=False) for chat in chats] if pane is not None]
        if not panes:
            await app.action_new_chat()
            return
        app.show_chat(next((pane for pane in panes if pane.chat.id == focused), panes[0]))
        app.record_open_chats()

    def keep_drafts(self) -> None:
        """Keeps what each saved chat's message box holds (written only where it changed): a crash loses at most
        DRAFTS_EVERY_S of typing."""
        for pane in self.app.chat_panes:
            pane.conversation.keep_draft(pane.chat_input.text)

    def _keep_alive(self) -> None:
        """Tells other mlxchats on the database that this one runs, so that none takes its tabs."""
        if self.app.store is not None:
            try:
                self.app.store.keep_alive()
            except StoreWriteError:
                pass  # saving shows its own problem; past the lease a launch may reopen these tabs too

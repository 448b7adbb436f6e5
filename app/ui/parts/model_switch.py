"""Another model without a restart: the picker (alt+m, the palette), then the new model loaded in the background
with its progress under the chats while the old one keeps answering, then the switch, the chats kept open."""

from __future__ import annotations

import time
from concurrent.futures import Future

from textual.widgets import TabbedContent

from mlxchat.app.session.model_choice import offered_models
from mlxchat.app.session.start import StartFailure
from mlxchat.app.ui.parts.chat_host import ChatHost
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.model_picker import ModelChoice, ModelPickerScreen
from mlxchat.app.ui.parts.kept_settings import keep_setting
from mlxchat.app.ui.widgets.conversation_view import note
from mlxchat.app.session.messages import LoadProgress
from mlxchat.app.ui.widgets.switch_progress import SwitchProgress
from mlxchat.engine import StartedEngine


class ModelSwitch:
    """Picks a model and switches the session's engine to it; the app owns one."""

    def __init__(self, app: ChatHost) -> None:
        self.app = app
        self.current = app.settings.model or ""  # the running model, as --model takes it ("" for the default)
        self._bar: SwitchProgress | None = None  # while a model loads

    def pick(self) -> None:
        """Opens the picker (a server's model is the server's own)."""
        app = self.app
        if app.settings.engine == "remote":
            app.notify("The model is the server's own: choose it where the server runs.", severity="warning")
        elif self._bar is not None:
            app.notify("Another model is loading already: its progress is under the chats.", severity="warning")
        else:
            app.push_screen(ModelPickerScreen(offered_models(), self.current, app.session.model_name), self._chosen)

    def _chosen(self, choice: ModelChoice | None) -> None:
        """Loads the chosen model, asking first when replies are being written (the switch stops them)."""
        if choice is None:
            return
        if choice.spec == self.current and not choice.save:
            self.app.notify(f"{self.app.session.model_name} is the model running.")
            return
        writing = self.app.session.busy_titles()
        if not writing:
            self._load(choice)
            return
        self.app.push_screen(ConfirmScreen(
            f"Switch to {choice.name}?",
            f"{len(writing)} repl{'ies are' if len(writing) != 1 else 'y is'} being written ({', '.join(writing)}): "
            "they stop when the new model is ready, and what they wrote is kept.", "Switch"),
            lambda yes: self._load(choice) if yes else None)

    def _load(self, choice: ModelChoice) -> None:
        app, plan = self.app, self.app.session.plan
        assert plan is not None
        # The slots as they are now (F2 may have changed them), evaluated again for the new model.
        settings = app.settings.updated({"model": choice.spec or None, "parallel": plan.requested_parallel,
                                         "ctx_size": plan.ctx_size}, "the model picker")
        bar = self._bar = SwitchProgress(choice.name)
        app.screen_stack[0].mount(bar, after=app.screen_stack[0].query_one(TabbedContent))
        began = time.monotonic()
        loading = app.session.load_in_background(settings, lambda p: bar.post_message(LoadProgress(p)))
        loading.add_done_callback(lambda done: self._loaded(choice, done, time.monotonic() - began))

    def _loaded(self, choice: ModelChoice, loading: Future[StartedEngine], seconds: float) -> None:
        """The model's engine started beside the running one, or why not (on the loading thread); the running model
        stays where it did not."""
        try:
            started = loading.result()
        except StartFailure as exc:
            self.app.call_later(self._failed, choice, exc.problem)
            return
        if not self.app.call_later(self._switch, choice, started, seconds):
            started.engine.shutdown()  # the app closed while the model loaded

    def _done_loading(self) -> None:
        if self._bar is not None:
            self._bar.remove()
            self._bar = None

    def _failed(self, choice: ModelChoice, problem: str) -> None:
        self._done_loading()
        self.app.notify(f"{choice.name} could not be loaded: {problem}\n{self.app.session.model_name} keeps running.",
                        severity="error", timeout=30)

    def _switch(self, choice: ModelChoice, started: StartedEngine, seconds: float) -> None:
        """Puts the loaded model in the running one's place; the chats say so, and the config keeps it if asked."""
        app = self.app
        self._done_loading()
        if not app.session.ready:  # (the app is closing)
            started.engine.shutdown()
            return
        stopped = app.session.switch(started)
        self.current = choice.spec
        for pane in app.chat_panes:
            if pane.chat.messages:
                pane.view.mount(note(f"The model is now {started.model_name}: this chat's next turn reads its "
                                     "conversation again."))
        for warning in started.warnings:
            app.notify(warning, severity="warning", timeout=10)
        halted = f"; {len(stopped)} repl{'ies' if len(stopped) != 1 else 'y'} stopped" if stopped else ""
        app.notify(f"Switched to {started.model_name} in {seconds:.1f} s{halted}. {started.plan.summary}.")
        if choice.save:
            keep_setting(app, "model", choice.spec, f"The model {choice.name}")

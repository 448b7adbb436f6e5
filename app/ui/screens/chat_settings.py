"""A chat's own settings: its system prompt, sampling, reasoning and tools, edited in a small form."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Button, Footer, Input, Label, SelectionList, Static, Switch

from mlxchat.app.config.settings import Sampling
from mlxchat.app.tools.servers import Tool
from mlxchat.app.ui.screens.modal import FormScreen
from mlxchat.app.ui.widgets.freed_widgets import FreedTextArea
from mlxchat.engine import SamplingParams

# The form's typed fields, in order: the Sampling field each sets. Empty, the optional ones are unset.
FIELDS = ("temperature", "top_p", "top_k", "max_tokens", "seed", "reasoning_budget")
OPTIONAL = {"seed": "none: a new seed each reply", "reasoning_budget": "none: the model reasons as long as it needs"}


@dataclass(frozen=True)
class ChatSettings:
    """What the form edits."""

    system_prompt: str
    sampling: SamplingParams
    tools_off: list[str]  # the tools its replies may not call ("server/tool")


class ChatSettingsScreen(FormScreen[ChatSettings | None]):
    """Edits a chat's system prompt and sampling; dismisses with the new settings, or None."""

    CSS_PATH = "chat_settings.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "confirm", "Save", priority=True)]

    def __init__(self, title: str, settings: ChatSettings, thinking_switch: bool, room: str = "",
                 tools: list[Tool] | None = None) -> None:
        """`thinking_switch`: whether the model's template can turn thinking off (the switch shows only then);
        `room`: what the system prompt and tool listing take of the chat's slot, in a line; `tools`: those its
        replies could call (each on or off for this chat)."""
        super().__init__()
        self._title = title
        self._settings = settings
        self._thinking_switch = thinking_switch
        self._room = room
        self._tools = tools or []

    def compose(self) -> ComposeResult:
        sampling = self._settings.sampling
        with Vertical():
            yield Static(f"Settings of “{self._title}” (from its next turn)", classes="settings-title",
                         markup=False)
            if self._room:
                yield Static(self._room, classes="settings-room", markup=False)
            yield Label("System prompt")
            yield FreedTextArea(self._settings.system_prompt, id="system-prompt", soft_wrap=True)
            with Grid():
                for name in FIELDS:
                    value = getattr(sampling, name)
                    yield Label(name)
                    yield Input("" if value is None else str(value), id=name, placeholder=OPTIONAL.get(name, ""),
                                tooltip=Sampling.model_fields[name].description)
                if self._thinking_switch:
                    yield Label("thinking")
                    yield Switch(sampling.thinking, id="thinking",
                                 tooltip=Sampling.model_fields["thinking"].description)
                yield Label("speculative")
                yield Switch(sampling.speculative == "lookup", id="speculative",
                             tooltip=Sampling.model_fields["speculative"].description)
            if self._tools:
                yield Label("Tools its replies may call (space turns one on or off)")
                yield SelectionList[str](*((f"{t.name} · {t.server}", t.key, t.key not in self._settings.tools_off)
                                           for t in self._tools), id="tools")
            yield Static(id="form-error", markup=False)
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Save", id="confirm", variant="primary")
            yield Static("ctrl+s or Enter in a field: save · escape: cancel", classes="settings-hint")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(FreedTextArea).focus()

    def read(self) -> ChatSettings:
        """The settings as typed; raises ValueError with every problem, one per line."""
        given = {name: self.query_one(f"#{name}", Input).value.strip() for name in FIELDS}
        try:
            # The config's own model checks the values: one set of limits for the file and the form.
            unset = {name: given[name] or None for name in OPTIONAL}
            switch = self.query("#thinking").results(Switch)
            thinking = next((s.value for s in switch), self._settings.sampling.thinking)
            speculative = "lookup" if self.query_one("#speculative", Switch).value else "off"
            checked = Sampling.model_validate({**given, **unset, "thinking": thinking, "speculative": speculative})
        except ValidationError as exc:
            raise ValueError("\n".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())) from None
        chosen = next((set(s.selected) for s in self.query(SelectionList).results(SelectionList)), None)
        # Tools that are not offered now (a server that did not start) keep the chat's choice.
        tools_off = [key for key in self._settings.tools_off if key not in {t.key for t in self._tools}]
        tools_off += [t.key for t in self._tools if chosen is not None and t.key not in chosen]
        return ChatSettings(self.query_one(FreedTextArea).text.strip(), checked.params(), tools_off)

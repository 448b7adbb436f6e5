"""A chat's own settings: its system prompt, sampling, reasoning and tools, edited in a small form."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, SelectionList, Static, Switch

from mlxchat.app.config.settings import Sampling
from mlxchat.app.tools.servers import ServerState, Tool
from mlxchat.app.ui.screens.modal import FormScreen
from mlxchat.app.ui.widgets.footer import Footer
from mlxchat.app.ui.workarounds.freed_widgets import FreedTextArea
from mlxchat.app.ui.widgets.server_restarts import ServerRestarts
from mlxchat.engine import SamplingParams

# The form's typed fields, in order: the Sampling field each sets. Empty, the optional ones are unset.
FIELDS = ("temperature", "top_p", "top_k", "max_tokens", "seed", "reasoning_budget")
OPTIONAL = {"seed": "none: a new seed each reply", "reasoning_budget": "none: the model reasons as long as it needs"}
ALL = "*"  # a server's row in the tools' list, before its name: it turns all the server's tools on or off
WAYS = ("off", "lookup", "draft")  # a chat's speculative decoding (Sampling.speculative)
NO_DRAFT = "draft (no draft_model)"  # (no draft model is loaded: the config sets none)


@dataclass(frozen=True)
class ChatSettings:
    """What the form edits."""

    system_prompt: str
    sampling: SamplingParams
    tools_off: list[str]  # the tools its replies may not call ("server/tool")
    tools_on: list[str]  # and those they may that their server's `tools` leaves off


class ChatSettingsScreen(FormScreen[ChatSettings | None]):
    """Edits a chat's system prompt and sampling; dismisses with the new settings, or None."""

    CSS_PATH = "chat_settings.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "confirm", "Save", priority=True)]

    def __init__(self, title: str, settings: ChatSettings, thinking_switch: bool,
                 room: Callable[[list[Tool]], str] | None = None, tools: list[Tool] | None = None,
                 on: set[str] | None = None, defaults: set[str] | None = None,
                 failed: list[ServerState] | None = None, restart: Callable[[str], bool] | None = None,
                 draft: str | None = None) -> None:
        """`thinking_switch`: whether the model's template can turn thinking off (the switch shows only then);
        `room`: what the system prompt and the listing of the tools given take of the chat's slot, in a line;
        `tools`: those its replies could call, `on` the keys of those the chat offers, `defaults` of those their
        server offers unless the chat chooses otherwise; `failed`: the MCP servers that failed, which `restart`
        starts again; `draft`: the draft model loaded, whose drafts a chat may choose (None: none is, "draft" is greyed)."""
        super().__init__()
        self._draft = draft
        self._title = title
        self._settings = settings
        self._thinking_switch = thinking_switch
        self._room = room
        self._tools = tools or []
        self._on = on if on is not None else {t.key for t in self._tools}
        self._defaults = defaults if defaults is not None else {t.key for t in self._tools}
        self._failed = failed or []
        self._restart = restart

    def compose(self) -> ComposeResult:
        sampling = self._settings.sampling
        with Vertical():
            # The title and the room line stay in view, above what scrolls (the tools' count is in the line).
            yield Static(f"Settings of “{self._title}” (from its next turn)", classes="settings-title",
                         markup=False)
            if self._room is not None:
                yield Static(self._room([t for t in self._tools if t.key in self._on]), classes="settings-room",
                             markup=False)
            if self._failed and self._restart is not None:  # (above what scrolls: a failed server is seen at once)
                yield ServerRestarts(self._failed, self._restart)
            with VerticalScroll():
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
                    with RadioSet(id="speculative", tooltip=Sampling.model_fields["speculative"].description):
                        for way in WAYS:
                            # (a chat set to "draft" while none is loaded shows so: it drafts nothing until one is)
                            missing = way == "draft" and self._draft is None
                            yield RadioButton(NO_DRAFT if missing else way, sampling.speculative == way, name=way,
                                              disabled=missing)
                if self._tools:
                    yield Label("Tools its replies may call (space turns one on or off; a server's row, all of it)")
                    yield SelectionList[str](*self._tool_rows(), id="tools")
            yield Static(id="form-error", markup=False)
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Save", id="confirm", variant="primary")
            yield Static("ctrl+s or Enter in a field: save · escape: cancel", classes="settings-hint")
        yield Footer()

    def _tool_rows(self) -> list[tuple[str, str, bool]]:
        """Each server's row (on where all its tools are), then its tools'."""
        rows = []
        for server in dict.fromkeys(t.server for t in self._tools):
            tools = [t for t in self._tools if t.server == server]
            rows.append((f"all of {server} ({len(tools)} tools)", ALL + server, all(t.key in self._on for t in tools)))
            rows += [(f"  {t.name}", t.key, t.key in self._on) for t in tools]
        return rows

    @on(SelectionList.SelectionToggled, "#tools")
    def _toggled(self, event: SelectionList.SelectionToggled[str]) -> None:
        """A server's row turns all its tools on or off; a tool's turns its server's row on once all are."""
        listed, value = event.selection_list, event.selection.value
        server = value[len(ALL):] if value.startswith(ALL) else value.split("/", 1)[0]
        tools = [t.key for t in self._tools if t.server == server]
        if value.startswith(ALL):
            for key in tools:
                (listed.select if value in listed.selected else listed.deselect)(key)
        else:
            (listed.select if set(tools) <= set(listed.selected) else listed.deselect)(ALL + server)

    @on(SelectionList.SelectedChanged, "#tools")
    def _recount(self, event: SelectionList.SelectedChanged[str]) -> None:
        if self._room is not None:
            chosen = set(event.selection_list.selected)
            self.query_one(".settings-room", Static).update(self._room([t for t in self._tools if t.key in chosen]))

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
            pressed = self.query_one("#speculative", RadioSet).pressed_button
            speculative = pressed.name if pressed else self._settings.sampling.speculative
            checked = Sampling.model_validate({**given, **unset, "thinking": thinking, "speculative": speculative})
        except ValidationError as exc:
            raise ValueError("\n".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())) from None
        chosen = next((set(s.selected) for s in self.query(SelectionList).results(SelectionList)), None)
        # Tools that are not offered now (a server that did not start) keep the chat's choice; the others are kept
        # where the chat's choice is not their server's.
        shown = {t.key for t in self._tools}
        tools_off = [key for key in self._settings.tools_off if key not in shown]
        tools_on = [key for key in self._settings.tools_on if key not in shown]
        if chosen is not None:
            tools_off += [t.key for t in self._tools if t.key in self._defaults and t.key not in chosen]
            tools_on += [t.key for t in self._tools if t.key not in self._defaults and t.key in chosen]
        return ChatSettings(self.query_one(FreedTextArea).text.strip(), checked.params(), tools_off, tools_on)

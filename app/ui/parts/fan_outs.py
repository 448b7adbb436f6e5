"""Fan-outs: one prompt to several new chats with different settings, side by side, and keeping one of them."""

from __future__ import annotations

import itertools

from mlxchat.app.chats.fan_out import Variant, default_variants, labels
from mlxchat.app.chats.chat import Chat
from mlxchat.app.ui import keys
from mlxchat.app.ui.screens.confirm import ConfirmScreen
from mlxchat.app.ui.screens.fan_out import FanOut, FanOutScreen
from mlxchat.app.ui.widgets.chat_pane import ChatPane
from mlxchat.app.ui.parts.chat_host import ChatHost


class FanOuts:
    """The app's fan-outs: the form, the variants' chats, and keeping one; the app owns one."""

    def __init__(self, app: ChatHost) -> None:
        self.app = app
        self._numbers = itertools.count(1)  # each fan-out's number: its chats share it

    def start(self) -> None:
        """Opens the fan-out form, from the shown chat's settings (else the defaults)."""
        app = self.app
        pane = app.active_chat
        system, sampling = ((pane.chat.system_prompt, pane.chat.sampling) if pane is not None
                            else (app.settings.system_prompt, app.sampling))
        app.push_screen(FanOutScreen(Variant(system, sampling), default_variants(system, sampling)), self._fan_out)

    async def _fan_out(self, fan_out: FanOut | None) -> None:
        """Opens a chat per variant, labelled with what differs, shows them in the grid, and sends the
        prompt to each: they run on the slots like any chat (those beyond the slots wait in line)."""
        if fan_out is None:
            return
        app = self.app
        group = next(self._numbers)
        # An empty chat the fan-out was started from gives way to it (the grid shows the variants only).
        blank = app.active_chat
        if blank is not None and (blank.chat.messages or blank.busy or blank.chat_input.text.strip()):
            blank = None
        panes = []
        for variant, label in zip(fan_out.variants, labels(fan_out.variants)):
            chat = Chat(None, model=app.session.model_name, system_prompt=variant.system_prompt,
                        sampling=variant.sampling)
            pane = await app.open_chat(chat, show=False)
            if pane is None:
                return
            pane.fan_out, pane.variant_label = group, label
            app.show_title(pane)
            panes.append(pane)
        if blank is not None:
            await app.close_chat(blank)
        app.show_chat(panes[0])
        app.show_grid(True)
        for pane in panes:
            await pane.send(fan_out.prompt)
        app.record_open_chats()

    def keep_variant(self) -> None:
        """Keeps the shown fan-out chat as a chat of its own; its siblings close, after a confirmation."""
        app = self.app
        pane = app.active_chat
        if pane is None:
            return
        if pane.fan_out is None:
            key = keys.key_for("fan_out", app.settings.keys)
            app.notify(f"This chat is not part of a fan-out ({key} starts one).", severity="warning")
            return
        siblings = [p for p in app.chat_panes if p.fan_out == pane.fan_out and p is not pane]

        async def confirmed(yes: bool | None) -> None:
            if yes and pane.is_attached:
                await self._keep_variant(pane, siblings)

        if not siblings:
            app.call_later(confirmed, True)
            return
        names = ", ".join(p.variant_label for p in siblings)
        app.push_screen(ConfirmScreen(
            f"Keep “{pane.chat_title}”?",
            f"The other {len(siblings)} chats of this fan-out ({names}) close; replies still being written stop. "
            f"They stay saved in the chat list ({keys.key_for('chat_list', app.settings.keys)}), each title "
            "marked with its settings.",
            "Close them"), confirmed)

    async def _keep_variant(self, pane: ChatPane, siblings: list[ChatPane]) -> None:
        app = self.app
        for sibling in siblings:
            if sibling.is_attached:
                # Saved with what set it apart, so the chat list tells the closed variants apart.
                sibling.chat.title = f"{sibling.chat.title} ({sibling.variant_label})"
                sibling.chat.touch()
                sibling.save()
                await app.close_chat(sibling)
        pane.fan_out, pane.variant_label = None, ""
        app.show_title(pane)
        app.show_chat(pane)
        app.show_grid(False)

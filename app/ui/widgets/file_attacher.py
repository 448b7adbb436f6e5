"""The files attached to the message being written, above its box: their chips and, while `@` picks one, the picker
in the box's place (the box stays the pane's own child: keys typed into a new chat find it at once)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical

from mlxchat.app.chats.chat import now
from mlxchat.app.files.attachments import Attachment, AttachmentError, read_attachment
from mlxchat.app.ui.widgets.attachment_tray import AttachmentTray
from mlxchat.app.ui.widgets.chat_input import ChatInput
from mlxchat.app.ui.widgets.file_picker import FilePicker


class FileAttacher(Vertical):
    """The attachments of `box`'s message: `pick()` (the box's @) opens the picker, a picked file becomes a chip
    (refused files are named with the reason, the picker stays open), escape goes back to the box with the @ typed."""

    DEFAULT_CSS = "FileAttacher { height: auto; }"

    def __init__(self, box: ChatInput, count: Callable[[str], int | None], max_kb: Callable[[], int]) -> None:
        """`box`: the message box (a sibling); `count(text)`: its tokens to the model (None: unknown); `max_kb()`:
        attach_max_kb as the settings say."""
        super().__init__()
        self._box = box
        self._count = count
        self._max_kb = max_kb

    def compose(self) -> ComposeResult:
        yield AttachmentTray()
        yield FilePicker()

    @property
    def tray(self) -> AttachmentTray:
        return self.query_one(AttachmentTray)

    @property
    def attachments(self) -> list[Attachment]:
        """The files attached to the message being written."""
        return self.tray.attachments

    def pick(self) -> None:
        """Opens the picker over the working folder in the box's place."""
        self._box.display = False
        self.query_one(FilePicker).open(Path.cwd())

    @on(FilePicker.Picked)
    def _picked(self, event: FilePicker.Picked) -> None:
        event.stop()
        try:
            attachment = read_attachment(event.path, self._max_kb(), Path.cwd(), now())
        except AttachmentError as exc:
            self.notify(f"Not attached: {exc}.", severity="error", timeout=10)
            return
        self.tray.add(dataclasses.replace(attachment, tokens=self._count(attachment.fenced())))
        self._back_to_box()

    @on(FilePicker.Closed)
    def _closed(self, event: FilePicker.Closed) -> None:
        event.stop()
        self._back_to_box()
        self._box.insert("@")  # (an @ the user meant to type)

    def _back_to_box(self) -> None:
        self.query_one(FilePicker).close()
        self._box.display = True
        self.screen.set_focus(self._box)

    def remove_last(self) -> None:
        """Takes the last attached file off the message."""
        removed = self.tray.remove_last()
        if removed is None:
            self.notify("No file is attached to this message.", severity="warning")
        else:
            self.notify(f"{removed.name} is no longer attached.")

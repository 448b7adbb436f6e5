"""The files attached to the message being written: a chip each above the message box (name, size, tokens); a click
on a chip or the remove key takes one off."""

from __future__ import annotations

from textual import events
from textual.containers import HorizontalGroup
from textual.widgets import Static

from mlxchat.app.files.attachments import Attachment


class AttachmentChip(Static):
    """One attached file; a click removes it."""

    def __init__(self, attachment: Attachment) -> None:
        super().__init__(f"@{attachment.label} ✕", classes="attachment-chip", markup=False)
        self.attachment = attachment

    def on_click(self, event: events.Click) -> None:
        event.stop()
        tray = self.parent
        if isinstance(tray, AttachmentTray):
            tray.remove(self.attachment)


class AttachmentTray(HorizontalGroup):
    """The attachments of the next message, in the order they were attached."""

    DEFAULT_CSS = """
    AttachmentTray { height: auto; display: none; padding: 0 1; }
    AttachmentTray.-some { display: block; }
    AttachmentTray .attachment-chip { width: auto; background: $boost; color: $text; margin-right: 1; padding: 0 1; }
    AttachmentTray .attachment-chip:hover { background: $error 40%; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.attachments: list[Attachment] = []

    def put(self, attachments: list[Attachment]) -> None:
        """Shows `attachments` as the message's (replacing any)."""
        self.attachments = list(attachments)
        self._draw()

    def add(self, attachment: Attachment) -> None:
        """Attaches a file (a file attached again replaces its earlier chip)."""
        self.attachments = [a for a in self.attachments if a.path != attachment.path] + [attachment]
        self._draw()

    def remove(self, attachment: Attachment) -> None:
        self.attachments = [a for a in self.attachments if a is not attachment]
        self._draw()

    def remove_last(self) -> Attachment | None:
        """Takes the last attached file off; returns it (None when there is none)."""
        if not self.attachments:
            return None
        last = self.attachments.pop()
        self._draw()
        return last

    def _draw(self) -> None:
        self.remove_children()
        self.mount_all([AttachmentChip(a) for a in self.attachments])
        self.set_class(bool(self.attachments), "-some")

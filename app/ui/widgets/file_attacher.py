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
from mlxchat.app.chats.store import ChatStore
from mlxchat.app.files.attachments import Attachment, AttachmentError, read_attachment
from mlxchat.app.files.images import is_image, no_images, read_image
from mlxchat.app.paths import default_db_path
from mlxchat.app.session.session import Session
from mlxchat.app.ui.widgets.attachment_tray import AttachmentTray
from mlxchat.app.ui.widgets.chat_input import ChatInput
from mlxchat.app.ui.widgets.file_picker import FilePicker


def images_dir(store: ChatStore | None) -> Path:
    """Where attached images' copies are kept: beside the chat database (default_db_path's folder without one)."""
    return (store.path if store else default_db_path()).parent / "images"


class FileAttacher(Vertical):
    """The attachments of `box`'s message: `pick()` (the box's @) opens the picker, a picked file becomes a chip
    (refused files are named with the reason, the picker stays open), escape goes back to the box with the @ typed."""

    DEFAULT_CSS = "FileAttacher { height: auto; }"

    def __init__(self, box: ChatInput, session: Session, max_kb: Callable[[], int], images: Path) -> None:
        """`box`: the message box (a sibling); `session`: a text's or an image's tokens to the model, whether it
        sees; `max_kb()`: attach_max_kb as the settings say; `images`: where images' copies are kept (images_dir)."""
        super().__init__()
        self._box = box
        self._count = session.tools.text_tokens
        self._max_kb = max_kb
        self._session = session
        self._images = images

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
            if is_image(event.path):
                attachment = self._image(event.path)
            else:
                attachment = read_attachment(event.path, self._max_kb(), Path.cwd(), now())
                attachment = dataclasses.replace(attachment, tokens=self._count(attachment.fenced()))
        except AttachmentError as exc:
            self.notify(f"Not attached: {exc}.", severity="error", timeout=10)
            return
        self.tray.add(attachment)
        self._back_to_box()

    def _image(self, path: Path) -> Attachment:
        """The image at `path` as an attachment with its tokens to the model (its processor's count)."""
        if not self._session.sees:
            raise AttachmentError(no_images(path, Path.cwd(), self._session.why_no_images))
        attachment = read_image(path, Path.cwd(), now(), self._images)
        try:
            tokens = self._session.tools.image_tokens(attachment.path)
        except Exception as exc:  # (the model's processor refuses this picture)
            raise AttachmentError(f"{attachment.name} cannot be read by the model's processor: {exc}") from None
        return dataclasses.replace(attachment, tokens=tokens)

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

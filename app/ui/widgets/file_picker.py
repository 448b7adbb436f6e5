"""The attachment picker: `@` in the message box opens it in the box's place, a fuzzy filter over the files under
the working folder (.gitignore respected); a typed or pasted path looks there instead, ctrl+u one folder up."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.fuzzy import Matcher
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from mlxchat.app.files.listing import MAX_FILES, files_under
from mlxchat.app.ui.workarounds.freed_widgets import FreedInput

SHOWN = 200  # the best matches listed; typing more narrows them
PATH_STARTS = ("/", "~", "./", "../")  # a filter starting so is a path, not a fuzzy query


@dataclass(frozen=True)
class Looking:
    """Where the picker looks for a filter: a folder, and the query within it."""

    folder: Path
    query: str


def looking(folder: Path, typed: str) -> Looking:
    """What `typed` asks of the picker over `folder`: a path's folder and the rest of it as the query
    ("~/notes/dr" looks for "dr" under ~/notes), else a fuzzy query over `folder`."""
    if not typed.startswith(PATH_STARTS):
        return Looking(folder, typed)
    head, _, tail = typed.rpartition("/")
    base = Path(os.path.expanduser(head or "/"))
    base = base if base.is_absolute() else folder / base
    return Looking(base.resolve(), tail) if base.is_dir() else Looking(folder, typed)


class FilePicker(Vertical):
    """A filter box over a list of files; enter picks the highlighted file (or the file a typed path names),
    escape closes it."""

    DEFAULT_CSS = """
    FilePicker { height: auto; max-height: 16; border: round $primary; padding: 0 1; display: none; }
    FilePicker.-open { display: block; }
    FilePicker Input, FilePicker Input:focus { border: none; height: 1; padding: 0; }
    FilePicker OptionList { height: auto; max-height: 10; border: none; padding: 0; }
    FilePicker .picker-hint { color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "close", "Cancel", priority=True),
        Binding("ctrl+u", "folder_up", "Folder above", priority=True),
        Binding("down", "move(1)", show=False, priority=True),
        Binding("up", "move(-1)", show=False, priority=True),
    ]

    @dataclass
    class Picked(Message):
        """The user picked `path`."""

        picker: FilePicker
        path: Path

    @dataclass
    class Closed(Message):
        """The user closed the picker without picking a file."""

        picker: FilePicker

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path.cwd()  # where it looks when the filter is not a path
        self._listed: tuple[Path, list[str]] | None = None  # the last folder listed, and its files

    def compose(self) -> ComposeResult:
        yield FreedInput(placeholder="a file to attach: type to filter, or a path", id="picker-filter")
        yield OptionList(id="picker-files")
        yield Static("", classes="picker-hint", markup=False)

    @property
    def is_open(self) -> bool:
        return self.has_class("-open")

    def open(self, folder: Path, typed: str = "") -> None:
        """Shows the picker over the files under `folder`, the keyboard in its filter (which starts with `typed`)."""
        self.folder = folder
        self._listed = None
        self.add_class("-open")
        box = self.query_one(Input)
        box.value = typed
        box.cursor_position = len(typed)
        self._show(typed)
        self.screen.set_focus(box)

    def close(self) -> None:
        self.remove_class("-open")

    def _files(self, folder: Path) -> list[str]:
        """The files under `folder`, listed once per folder while the picker is open."""
        if self._listed is None or self._listed[0] != folder:
            self._listed = (folder, files_under(folder))
        return self._listed[1]

    @on(Input.Changed, "#picker-filter")
    def _filter(self, event: Input.Changed) -> None:
        event.stop()
        self._show(event.value)

    def _show(self, typed: str) -> None:
        """Lists the files that match `typed`, best first."""
        where = looking(self.folder, typed)
        files = self._files(where.folder)
        if where.query:
            matcher = Matcher(where.query)
            scored = sorted(((matcher.match(f), f) for f in files), key=lambda pair: -pair[0])
            options = [Option(matcher.highlight(f), id=f) for score, f in scored if score > 0][:SHOWN]
        else:
            options = [Option(Content(f), id=f) for f in files[:SHOWN]]
        listing = self.query_one(OptionList)
        listing.clear_options()
        listing.add_options(options)
        listing.highlighted = 0 if options else None
        more = " (the first ones: type to narrow)" if len(files) >= MAX_FILES else ""
        self.query_one(".picker-hint", Static).update(
            f"{len(options)} of {len(files)} files under {where.folder}{more} · enter attaches · a path (/ ~/ ../) "
            "looks there · ctrl+u: the folder above · escape: back to the message")

    def action_move(self, step: int) -> None:
        listing = self.query_one(OptionList)
        if listing.option_count:
            listing.highlighted = ((listing.highlighted or 0) + step) % listing.option_count

    def action_folder_up(self) -> None:
        """Looks one folder up from where it looks now."""
        where = looking(self.folder, self.query_one(Input).value)
        self.folder = where.folder.parent
        self.query_one(Input).value = ""
        self._show("")

    def action_close(self) -> None:
        self.post_message(self.Closed(self))

    @on(Input.Submitted, "#picker-filter")
    def _submitted(self, event: Input.Submitted) -> None:
        """Picks the file a typed (or pasted) path names, else the highlighted one."""
        event.stop()
        typed = event.value.strip().strip("'\"")  # (a path dropped on a terminal comes quoted)
        named = Path(os.path.expanduser(typed)) if typed else None
        if named is not None and not named.is_absolute():
            named = self.folder / named
        if named is not None and named.is_file():
            self.post_message(self.Picked(self, named))
            return
        listing = self.query_one(OptionList)
        if listing.highlighted is None:
            self.notify(f"No file matches {typed!r}: change the filter, or give a path.", severity="warning")
            return
        chosen = listing.get_option_at_index(listing.highlighted).id or ""
        self.post_message(self.Picked(self, looking(self.folder, typed).folder / chosen))

    @on(OptionList.OptionSelected, "#picker-files")
    def _clicked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        where = looking(self.folder, self.query_one(Input).value)
        self.post_message(self.Picked(self, where.folder / (event.option.id or "")))

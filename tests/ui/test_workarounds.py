"""Each workaround in app/ui/workarounds says which Textual behaviour it works around, and on which Textual version it
was checked: a Textual of another major version fails here, so that whoever upgrades it checks each behaviour again
(what each does is tested where it is used: test_line_updates, test_closed_chats_freed, test_reply_view,
test_reply_frames)."""

from __future__ import annotations

import importlib
import pkgutil
import re

import textual

import mlxchat.app.ui.workarounds as workarounds


def test_every_workaround_names_the_textual_it_was_checked_on_and_that_is_the_one_installed() -> None:
    names = [m.name for m in pkgutil.iter_modules(workarounds.__path__)]
    assert {"line_updates", "stale_watchers", "gc_hold", "freed_widgets", "laid_out_once"} <= set(names)
    for name in names:
        said = importlib.import_module(f"{workarounds.__name__}.{name}").WORKS_AROUND
        version = re.match(r"Textual (\d+)(?:\.\d+)*: \S", said)
        assert version, f"{name}: WORKS_AROUND = {said!r} names no Textual version and behaviour"
        assert textual.__version__.split(".")[0] == version.group(1), (
            f"{name} works around Textual {version.group(1)}'s {said.partition(': ')[2]!r}, and Textual "
            f"{textual.__version__} is installed: check that it still does so, then update WORKS_AROUND or drop it")

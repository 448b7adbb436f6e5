"""Each workaround in app/ui/workarounds says which Textual behaviour it works around, and on which Textual version it
was checked: a Textual of another major version fails here, so that whoever upgrades it checks each behaviour again
(what each does is tested where it is used: test_line_updates, test_closed_chats_freed, test_reply_view,
test_reply_frames). Where the behaviour can be shown alone, a test here shows it, and fails once Textual changes."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import re

import pytest
import textual
from rich.segment import Segment
from rich.style import Style
from textual.app import App
from textual.cache import FIFOCache
from textual.strip import Strip
from textual.reactive import reactive
from textual.widgets import Static

import mlxchat.app.ui.workarounds as workarounds
from mlxchat.app.ui.workarounds import lazy_strips
from mlxchat.app.ui.workarounds.stale_watchers import drop_watchers


def test_every_workaround_names_the_textual_it_was_checked_on_and_that_is_the_one_installed() -> None:
    names = [m.name for m in pkgutil.iter_modules(workarounds.__path__)]
    assert {"line_updates", "stale_watchers", "gc_hold", "freed_widgets", "laid_out_once", "lazy_strips"} <= set(names)
    for name in names:
        said = importlib.import_module(f"{workarounds.__name__}.{name}").WORKS_AROUND
        version = re.match(r"Textual (\d+)(?:\.\d+)*: \S", said)
        assert version, f"{name}: WORKS_AROUND = {said!r} names no Textual version and behaviour"
        assert textual.__version__.split(".")[0] == version.group(1), (
            f"{name} works around Textual {version.group(1)}'s {said.partition(': ')[2]!r}, and Textual "
            f"{textual.__version__} is installed: check that it still does so, then update WORKS_AROUND or drop it")


def test_textual_keeps_a_removed_widget_s_watcher_until_the_value_changes_and_drop_watchers_lets_it_go() -> None:
    """stale_watchers' behaviour (Textualize/textual#6666): a widget that watches the app's reactive and is removed
    stays in the app's watchers, holding it, until the value next changes. Where Textual lets it go by itself, the
    first assertion fails: drop the workaround."""

    class Watched(App[None]):
        shade = reactive("light")

    class Watcher(Static):
        def on_mount(self) -> None:
            self.watch(self.app, "shade", self.refresh)

    def watching(app: App[None]) -> list[object]:
        return [node for node, _ in getattr(app, "__watchers", {}).get("shade", [])]

    async def main() -> None:
        app = Watched()
        async with app.run_test() as pilot:
            widget = Watcher()
            await app.mount(widget)
            assert watching(app) == [widget]
            await widget.remove()
            await pilot.pause()
            assert widget._closing and watching(app) == [widget], "Textual lets a removed widget's watcher go now"
            drop_watchers(app)
            assert watching(app) == []

    asyncio.run(main())


def test_textual_makes_a_strips_seven_caches_as_it_is_made_and_lazy_strips_makes_each_on_its_first_use() -> None:
    """lazy_strips' behaviour: where Textual's own Strip makes other caches (or none as it is made), the first
    assertion fails: update SIZES, or drop the workaround."""
    segments = [Segment("hello "), Segment("world", Style(bold=True))]
    own = Strip.__new__(Strip)
    lazy_strips.TEXTUAL_OWN(own, segments)
    made = {name: getattr(own, name)._maxsize for name in Strip.__slots__
            if isinstance(getattr(own, name, None), FIFOCache)}
    assert made == lazy_strips.SIZES, "Textual's Strip makes other caches as it is made now"
    assert lazy_strips.install()
    strip = Strip(segments)
    for name in lazy_strips.SIZES:
        with pytest.raises(AttributeError):  # not made yet
            object.__getattribute__(strip, name)
    assert strip.crop(2, 8) is strip.crop(2, 8)  # made on first use, and kept
    assert strip.crop(2, 8).text == own.crop(2, 8).text == "llo wo"
    assert [s.text for s in strip.divide([3, 7])] == [s.text for s in own.divide([3, 7])]
    italic = Style(italic=True)
    assert list(strip.apply_style(italic)) == list(own.apply_style(italic))
    assert strip.cell_length == own.cell_length and strip.text == own.text
    with pytest.raises(AttributeError):
        strip.not_a_cache  # noqa: B018 (other names are still missing)

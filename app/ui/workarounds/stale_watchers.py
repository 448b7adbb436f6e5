"""Letting go of watchers that Textual keeps after their widget is gone.

A widget that watches another object's reactive (`watch`, `data_bind`) leaves its watcher in that
object until the value next changes (Textualize/textual#6666), and the watcher holds the widget and
whatever the widget holds. On a long-lived object (the app, the main screen's footer) they pile up.
"""

from __future__ import annotations

from textual.dom import DOMNode

WORKS_AROUND = "Textual 8: a reactive keeps a removed widget's watcher until its value next changes (#6666)"


def drop_watchers(watched: object, of: DOMNode | None = None) -> None:
    """Drops `watched`'s watchers that belong to `of`, or (without it) to widgets that have closed."""
    for watchers in getattr(watched, "__watchers", {}).values():
        watchers[:] = [(node, callback) for node, callback in watchers
                       if not (node is of if of is not None else node._closing)]

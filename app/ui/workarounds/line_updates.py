"""Screen updates that draw, of each widget, only the lines the update changes.

Textual draws a partial screen update (a few lines of some widgets repainted) by rendering every widget that
overlaps the box around all the changed regions, each whole, then keeping the changed lines. With the chats side
by side that box is most of the screen: a frame that repaints eight replies' last lines, or a status line in each
chat, rendered every widget on the screen. `install` replaces that one method of Textual's compositor with one that
renders, of each widget, the lines that cross a changed span, and cuts and layers them as Textual does: the same
update, byte for byte (tests/ui/test_line_updates.py); 22 ms of the UI thread less a round of 8 chats in the grid
(of 380, `mlxchat bench --ui`). Only for the Textual it was checked on: another keeps Textual's own.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region

CHECKED_ON = "8."  # the Textual versions this was compared with, byte for byte
WORKS_AROUND = "Textual 8: a partial screen update renders every widget in the box around all the changes, whole"
TEXTUAL_OWN = Compositor.render_partial_update


def install() -> bool:
    """Makes partial screen updates render only their lines, where Textual is a version it was checked on."""
    if not importlib.metadata.version("textual").startswith(CHECKED_ON):
        return False
    Compositor.render_partial_update = render_changed_lines  # type: ignore[method-assign]
    return True


def render_changed_lines(self: Compositor) -> ChopsUpdate | None:
    """Compositor.render_partial_update, rendering of each widget only the lines a changed span crosses."""
    update_regions = self._dirty_regions.copy()
    self._dirty_regions.clear()
    if not update_regions:
        return None
    spans = list(self._regions_to_spans(update_regions))
    changed: dict[int, list[tuple[int, int]]] = {}
    for y, x1, x2 in spans:
        changed.setdefault(y, []).append((x1, x2))
    top, bottom = min(changed), max(changed) + 1
    cuts = self.cuts
    chops: list[dict[int, Any]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
    for widget, (region, clip) in self.visible_widgets.items():  # (front to back: the first strip for a cut wins)
        shown = region.intersection(clip)
        left, right = shown.x, shown.right
        lines = [y for y in range(max(shown.y, top), min(shown.bottom, bottom))
                 if any(x1 < right and x2 > left for x1, x2 in changed.get(y, ()))]
        for first, count in _runs(lines):
            strips = widget.render_lines(Region(left - region.x, first - region.y, shown.width, count))
            for y, strip in zip(range(first, first + count), strips):
                line = chops[y]
                line_cuts = [cut for cut in cuts[y] if right >= cut >= left]
                for cut, piece in zip(line_cuts, strip.divide([cut - left for cut in line_cuts[1:]])):
                    if line.get(cut) is None:
                        line[cut] = piece
    return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in cuts])


def _runs(lines: list[int]) -> list[tuple[int, int]]:
    """Ascending line numbers as runs of consecutive ones: (first, count)."""
    runs: list[tuple[int, int]] = []
    for y in lines:
        if runs and runs[-1][0] + runs[-1][1] == y:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((y, 1))
    return runs

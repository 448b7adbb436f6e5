"""A slider for a small whole number (the slot count): keyboard and mouse, themed like Textual's Input.

Textual has no slider of its own. The `textual-slider` package was tried: it works with Textual 8
but is GPL-3.0 (mlxchat is not), has no home/end keys and draws with Textual's private
ScrollBarRender, so this small widget stands in for it.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget


class Slider(Widget, can_focus=True):
    """Picks a whole number in minimum..maximum: arrows step, home/end jump, click or drag to set."""

    BINDINGS = [
        Binding("left,minus", "step(-1)", "Fewer", show=False),
        Binding("right,plus,equals_sign", "step(1)", "More", show=False),
        Binding("home", "jump(False)", "Minimum", show=False),
        Binding("end", "jump(True)", "Maximum", show=False),
    ]

    COMPONENT_CLASSES = {"slider--filled", "slider--track", "slider--thumb", "slider--label", "slider--value"}

    DEFAULT_CSS = """
    Slider {
        height: 4; width: 1fr; padding: 0 1;
        border: tall $border-blurred; background: $surface;
    }
    Slider:focus { border: tall $border; background-tint: $foreground 5%; }
    Slider > .slider--filled { color: $primary; }
    Slider > .slider--track { color: $panel-lighten-2; }
    Slider > .slider--thumb { color: $primary; text-style: bold; }
    Slider:focus > .slider--thumb { color: $accent; }
    Slider > .slider--label { color: $text-muted; }
    Slider > .slider--value { color: $text; text-style: bold; }
    """

    value: reactive[int] = reactive(1, init=False)
    """The number chosen; kept within minimum..maximum."""

    class Changed(Message):
        """The slider's value changed (by a key, the mouse or code)."""

        def __init__(self, slider: Slider, value: int) -> None:
            super().__init__()
            self.slider = slider
            self.value = value

        @property
        def control(self) -> Slider:
            """The slider that changed (lets `@on(Slider.Changed, "#id")` select it)."""
            return self.slider

    def __init__(
        self,
        minimum: int,
        maximum: int,
        value: int | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        self.minimum = minimum
        self.maximum = max(maximum, minimum)
        self.set_reactive(Slider.value, self.validate_value(minimum if value is None else value))

    def validate_value(self, value: int) -> int:
        return min(max(value, self.minimum), self.maximum)

    def watch_value(self, value: int) -> None:
        self.post_message(self.Changed(self, value))

    def action_step(self, delta: int) -> None:
        """Moves one step down or up."""
        self.value += delta

    def action_jump(self, to_maximum: bool) -> None:
        """Goes to either end."""
        self.value = self.maximum if to_maximum else self.minimum

    def _column(self, value: int, width: int) -> int:
        """Where `value` sits on a track `width` cells wide."""
        span = self.maximum - self.minimum
        return round((value - self.minimum) * (width - 1) / span) if span and width > 1 else 0

    def _value_at(self, column: int, width: int) -> int:
        """The value nearest to a column of the track."""
        span = self.maximum - self.minimum
        if width <= 1 or not span:
            return self.minimum
        return self.validate_value(self.minimum + round(column * span / (width - 1)))

    def render(self) -> Text:
        width = self.content_size.width
        thumb = self._column(self.value, width)
        style = self.get_component_rich_style
        track = Text(no_wrap=True, overflow="crop")
        track.append("━" * thumb, style("slider--filled"))
        track.append("●", style("slider--thumb"))
        track.append("─" * max(width - thumb - 1, 0), style("slider--track"))
        return Text("\n", no_wrap=True).join([track, self._labels(width)])

    def _labels(self, width: int) -> Text:
        """Every value under its place on the track when they fit, else the two ends; the value in bold."""
        widest = len(str(self.maximum)) + 1
        spaced = self.maximum == self.minimum or width // (self.maximum - self.minimum + 1) >= widest
        shown = range(self.minimum, self.maximum + 1) if spaced else (self.minimum, self.value, self.maximum)
        cells = [" "] * width
        styles = [""] * width
        for value in sorted(set(shown), key=lambda v: v == self.value):  # the value is drawn last, on top
            label = str(value)
            start = min(max(self._column(value, width) - len(label) // 2, 0), max(width - len(label), 0))
            for i, char in enumerate(label[: width - start]):
                cells[start + i] = char
                styles[start + i] = "slider--value" if value == self.value else "slider--label"
        line = Text(no_wrap=True, overflow="crop")
        for char, component in zip(cells, styles):
            line.append(char, self.get_component_rich_style(component) if component else "")
        return line

    def _set_from(self, column: int) -> None:
        self.value = self._value_at(column, self.content_size.width)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        event.stop()
        self.capture_mouse()
        self._set_from(offset.x)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if self.app.mouse_captured is self:
            self._set_from(event.get_content_offset_capture(self).x)

    def on_mouse_up(self, event: events.MouseUp) -> None:
        if self.app.mouse_captured is self:
            self.release_mouse()

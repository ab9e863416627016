"""The ipywidgets side: a box of HTML widgets and buttons that shows a PanelView.

Imported only when a panel is made. Uses only widgets and traits that exist
in both ipywidgets 7.7 (what Colab ships) and 8: ``HTML``, ``Button``,
``FloatProgress``, ``HBox``/``VBox``, ``Layout``. Values are assigned only
when they change (traitlets sends nothing for an equal value), so a
refresh with nothing new costs no messages.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable

import ipywidgets as w

from colab_resume.panel.model import PanelView

Action = Callable[[], None]

# Widgets give HTML the line height of a button row (28 px): fine for one
# line, but wrapped and listed lines then read as separate, spaced-out items.
LINE_STYLE = "line-height:1.45;margin:1px 0"
HANGING_INDENT = "padding-left:2em;text-indent:-2em"  # a wrapped event stays one


def _unbroken_parts(text: str) -> str:
    """``"a b · c d"`` wrapped only at the dots (``"ETA"`` stays with its time)."""
    return " · ".join(part.replace(" ", "\u00a0") for part in text.split(" · "))


def _line(text: str, style: str = "") -> str:
    """``text`` escaped, as one compact block (it may wrap)."""
    return f'<div style="{LINE_STYLE};{style}">{html.escape(text)}</div>'


def _button(label: str, style: str, tooltip: str) -> w.Button:
    return w.Button(
        description=label,
        button_style=style,
        tooltip=tooltip,
        layout=w.Layout(width="auto"),
    )


class PanelBox(w.VBox):  # type: ignore[misc]  # ipywidgets ships no type hints
    """The panel: display it; :meth:`show` puts a :class:`PanelView` in it."""

    def __init__(self, *, title: str, read_only: bool) -> None:
        self.title = w.HTML()
        self.badge = w.HTML()
        self.accelerator = w.HTML()
        self.progress = w.HTML()
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0)
        self.metrics = w.HTML()
        self.chart = w.HTML()
        self.checkpoint = w.HTML()
        self.heartbeat = w.HTML()
        self.goodput = w.HTML()
        self.detail = w.HTML()
        self.events = w.HTML()
        self.report = w.HTML()
        self.notice = w.HTML()
        self._noticed: tuple[str, int | None] | None = None  # see say()
        self.save_button = _button("Checkpoint now", "info", "save at the next step")
        self.pause_button = _button("Pause", "warning", "checkpoint, then hold")
        self.stop_button = _button("Stop", "danger", "checkpoint, then stop cleanly")
        self.report_button = _button("Report", "", "plot the run's history")
        self.takeover_button = _button("Take over", "danger", "fence the holder")
        self.confirm_button = _button("Yes, take over", "danger", "fence it now")
        self.cancel_button = _button("Cancel", "", "keep watching")
        if read_only:
            buttons = [self.report_button, self.takeover_button]
        else:
            buttons = [
                self.save_button,
                self.pause_button,
                self.stop_button,
                self.report_button,
            ]
        self.confirm = w.HBox([self.confirm_button, self.cancel_button])
        self.confirm.layout.display = "none"
        self.title.value = f"<b>{html.escape(title)}</b>"
        super().__init__(
            [
                w.HBox([self.title, self.badge]),
                self.accelerator,
                w.HBox([self.bar, self.progress]),
                self.metrics,
                self.chart,
                self.checkpoint,
                self.heartbeat,
                self.goodput,
                self.detail,
                self.events,
                w.HBox(buttons),
                self.confirm,
                self.notice,
                self.report,
            ],
            layout=w.Layout(border="1px solid #ddd", padding="6px", width="100%"),
        )
        # CSS classes name the parts (for styling and for the browser tests).
        self.add_class("colab-resume-panel")
        for name in (
            "title",
            "badge",
            "progress",
            "checkpoint",
            "heartbeat",
            "goodput",
            "events",
        ):
            getattr(self, name).add_class(f"colab-resume-{name}")

    def show(self, v: PanelView) -> None:
        """Put ``v`` on screen (only changed values are sent)."""
        self.badge.value = (
            f'<span style="background:{v.badge_colour};color:white;'
            f'padding:2px 8px;border-radius:8px;margin-left:8px">'
            f"{html.escape(v.badge)}</span>"
        )
        self.accelerator.value = _line(v.accelerator)
        self.progress.value = _line(_unbroken_parts(v.progress))
        self.bar.value = v.fraction or 0.0
        self.bar.bar_style = v.bar_style
        self.bar.layout.visibility = "hidden" if v.fraction is None else "visible"
        self.metrics.value = _line(v.metrics)
        self.chart.value = v.chart_svg  # built by us from numbers only
        self.checkpoint.value = _line(v.checkpoint)
        self.heartbeat.value = _line(v.heartbeat)
        self.goodput.value = _line(v.goodput) if v.goodput else ""
        italic = "font-style:italic"
        self.detail.value = _line(v.detail, style=italic) if v.detail else ""
        self.events.value = "".join(
            _line(text, style=f"color:{colour};font-size:90%;{HANGING_INDENT}")
            for colour, text in v.events
        )
        self.pause_button.description = v.pause_label
        for button in (self.save_button, self.pause_button, self.stop_button):
            button.disabled = not v.buttons_enabled
        self.takeover_button.disabled = not v.takeover_enabled
        if v.takeover_tooltip:
            self.takeover_button.tooltip = v.takeover_tooltip
        # A notice answers a click ("pausing: ..."); once the state or the
        # checkpoint it was about has moved on, the badge and lines say it.
        if self._noticed is not None and (v.badge, v.checkpoint_step) != self._noticed:
            self.notice.value = ""
            self._noticed = None

    def show_report(self, png: bytes | None, message: str = "") -> None:
        """Show the run report picture (or why there is none)."""
        if png is None:
            self.report.value = html.escape(message)
            return
        data = base64.b64encode(png).decode("ascii")
        self.report.value = (
            f'<img style="max-width:100%" src="data:image/png;base64,{data}"/>'
        )

    def say(self, message: str, *, until_changed: PanelView | None = None) -> None:
        """Show a one-line notice; with ``until_changed``, only until the badge
        or the committed checkpoint differ from that view's."""
        self.notice.value = _line(message)
        self._noticed = (
            (until_changed.badge, until_changed.checkpoint_step)
            if until_changed is not None
            else None
        )

    def ask_confirmation(self, ask: bool) -> None:
        self.confirm.layout.display = "flex" if ask else "none"

"""What the panel shows, as plain data: no widgets, no I/O, easy to test.

:class:`PanelFacts` is what is known about a run (from a live agent's
public :class:`~colab_resume.agent.progress.Progress` by :func:`facts_of`,
or from a run directory by the monitor); :func:`view` turns it into
:class:`PanelView`, the text and colours the widgets display.
"""

from __future__ import annotations

import dataclasses
import html
import math
import re
import time
from collections.abc import Iterable, Sequence

from colab_resume.agent.progress import Progress
from colab_resume.events import Event

# Not worth a line in the panel's event list.
QUIET_EVENTS = ("checkpoint.upload.progress", "checkpoint.committed", "run.resumed")
# Retention deletes old checkpoints after every save (keep=): one line counts
# them all instead of one line each pushing the events worth reading away.
PRUNED = "checkpoint.pruned"
EVENT_LINES = 6
_DELETED_COUNT = re.compile(r"deleted (\d+) ")

# Badge colours by state; the states of docs/DESIGN.md §4 plus the holder's own.
BADGE_COLOURS = {
    "not started": "#9e9e9e",
    "starting": "#1e88e5",
    "waiting": "#fb8c00",
    "training": "#43a047",
    "recovering": "#fb8c00",
    "paused": "#8e24aa",
    "stopped": "#757575",
    "fenced": "#e53935",
    "completed": "#00897b",
    "failed": "#e53935",
    "stalled": "#fb8c00",
    "dead": "#e53935",
    "new": "#9e9e9e",
}
LEVEL_COLOURS = {"info": "#555", "warning": "#e65100", "error": "#c62828"}
# The holder's session is over: no beats come, and the panel is no longer
# refreshed, so an age ("0s ago") would stay on screen, growing wrong.
ENDED_STATES = ("stopped", "fenced", "completed", "failed")
# The progress bar's ipywidgets style by state ("": the default blue).
BAR_STYLES = {
    "paused": "warning",
    "completed": "success",
    "fenced": "danger",
    "failed": "danger",
    "dead": "danger",
}


@dataclasses.dataclass(frozen=True)
class PanelFacts(Progress):
    """Everything the panel may show: an agent's :class:`Progress` (whose
    fields it shares; see there), or what a reader of the run directory
    knows, plus:

    Attributes:
        detail: one explanatory line (the monitor's verdict, an error).
        read_only: a monitor (no steering buttons).
        goodput: the run's goodput in one line (all sessions), "" until read.
    """

    detail: str = ""
    read_only: bool = False
    goodput: str = ""


def facts_of(progress: Progress) -> PanelFacts:
    """The panel's facts from an agent's progress snapshot."""
    fields = {f.name: getattr(progress, f.name) for f in dataclasses.fields(progress)}
    fields["events"] = event_lines(progress.events)
    return PanelFacts(**fields)


def event_lines(events: Iterable[Event], limit: int = EVENT_LINES) -> list[Event]:
    """The events worth a line, oldest first, at most ``limit``.

    Quiet kinds are dropped; every ``checkpoint.pruned`` becomes one line,
    at the time of the newest, counting the checkpoints deleted.
    """
    shown: list[Event] = []
    pruned: list[Event] = []
    for event in events:
        if event.kind in QUIET_EVENTS:
            continue
        if event.kind == PRUNED:
            pruned.append(event)
        else:
            shown.append(event)
    if pruned:
        deleted = sum(_deleted(e) for e in pruned)
        passes = f" in {len(pruned)} passes" if len(pruned) > 1 else ""
        shown.append(
            Event(
                pruned[-1].time,
                PRUNED,
                f"retention deleted {deleted} old checkpoint(s){passes}",
            )
        )
        shown.sort(key=lambda e: e.time)
    return shown[-limit:]


def _deleted(event: Event) -> int:
    """How many checkpoints one retention pass deleted (from its data or text)."""
    names = event.data.get("checkpoints")
    if isinstance(names, list):
        return len(names)
    match = _DELETED_COUNT.search(event.message)
    return int(match.group(1)) if match else 1


@dataclasses.dataclass(frozen=True)
class PanelView:
    """The panel's content, ready for widgets (HTML snippets are escaped)."""

    badge: str
    badge_colour: str
    accelerator: str
    progress: str
    fraction: float | None
    bar_style: str  # an ipywidgets bar_style: "", "success", "warning", "danger"
    metrics: str
    chart_svg: str
    checkpoint: str
    checkpoint_step: int | None  # the newest committed one
    heartbeat: str
    goodput: str
    events: tuple[tuple[str, str], ...]  # (colour, text)
    detail: str
    pause_label: str  # "Pause" or "Resume"
    buttons_enabled: bool
    takeover_enabled: bool = False  # the monitor's Take over
    takeover_tooltip: str = ""


def view(facts: PanelFacts) -> PanelView:
    """Turn facts into what the panel displays."""
    state = facts.state if facts.state in BADGE_COLOURS else "starting"
    badge = state
    if state == "waiting" and facts.waiting_left_s is not None:
        left = max(0, facts.waiting_left_s)
        badge = f"previous session silent: taking over in {left:.0f}s"
    return PanelView(
        badge=badge,
        badge_colour=BADGE_COLOURS[state],
        accelerator=f"accelerator: {facts.accelerator or 'not connected yet'}",
        progress=_progress(facts),
        fraction=_fraction(facts),
        bar_style=BAR_STYLES.get(state, ""),
        metrics=" · ".join(
            f"{k} {_num(v)}" for k, v in list(facts.metrics.items())[:6]
        ),
        chart_svg=sparkline([v for _, v in facts.series]),
        checkpoint=_checkpoint(facts, ended=state in ENDED_STATES),
        checkpoint_step=facts.checkpoint_step,
        heartbeat=_heartbeat(facts, ended=state in ENDED_STATES),
        goodput=facts.goodput,
        events=tuple(
            (
                LEVEL_COLOURS.get(e.level, "#555"),
                _event_text(e, facts.now, ended=state in ENDED_STATES),
            )
            for e in facts.events
        ),
        detail=facts.detail,
        pause_label="Resume" if state == "paused" or facts.pause_requested else "Pause",
        buttons_enabled=not facts.read_only
        and state in ("starting", "training", "paused", "recovering"),
        takeover_enabled=facts.read_only and state not in NOTHING_TO_TAKE_OVER,
        takeover_tooltip=NOTHING_TO_TAKE_OVER.get(state, TAKEOVER_TOOLTIP),
    )


TAKEOVER_TOOLTIP = "fence the holder: your next fit takes the run at once"
# Monitor states in which Take over has nobody to fence, and why.
NOTHING_TO_TAKE_OVER = {
    "completed": (
        "the run is completed: nothing to take over (fit on it returns the "
        "trained model, or continues it when asked for more epochs)"
    ),
    "new": "nobody has taken this run yet: your fit takes it at once",
    "dead": "no live session holds the run: your fit takes it at once",
    "stopped": "its session stopped cleanly and holds nothing: your fit takes it "
    "at once",
    "failed": "its session failed and holds nothing: your fit takes it at once",
}


def _progress(f: PanelFacts) -> str:
    if f.step is None:
        return "step —"
    parts = [f"step {f.step:,}" + (f" / {f.total_steps:,}" if f.total_steps else "")]
    if f.epoch is not None:
        parts.append(f"epoch {f.epoch + 1}")
    if f.steps_per_second:
        parts.append(f"{f.steps_per_second:.1f} steps/s")
        if f.total_steps and f.total_steps > f.step:
            parts.append(
                "ETA " + duration((f.total_steps - f.step) / f.steps_per_second)
            )
    return " · ".join(parts)


def _fraction(f: PanelFacts) -> float | None:
    if f.step is None or not f.total_steps:
        return None
    return min(1.0, max(0.0, f.step / f.total_steps))


def _checkpoint(f: PanelFacts, *, ended: bool) -> str:
    if f.checkpoint_step is None:
        text = "checkpoint: none committed"
        if not ended:
            text += " yet"
    else:
        text = f"checkpoint: step {f.checkpoint_step:,}"
        if f.checkpoint_time is not None and not ended:
            text += f", {duration(f.now - f.checkpoint_time)} ago"
        if f.checkpoint_uploaded_bytes is not None:
            text += f", {size(f.checkpoint_uploaded_bytes)} uploaded"
        elif f.checkpoint_bytes:
            text += f", {size(f.checkpoint_bytes)}"
    frozen = _frozen(f)
    if frozen:
        text += f" ({frozen})"
    if f.upload_rate:
        text += f" · upload {size(f.upload_rate)}/s"
    if f.uploading:
        text += " · uploading"
    if f.stall_count:
        text += (
            f" · ⚠ {f.stall_count} stall(s), {f.stall_seconds:.0f}s waited for uploads"
        )
    return text


def _frozen(f: PanelFacts) -> str:
    """The frozen-array mode, and what it kept out of the last save ("": unknown)."""
    if f.frozen is None:
        return ""
    mode = f"frozen={f.frozen!r}"
    if f.checkpoint_step is None:
        return mode
    if f.checkpoint_shared_bytes:
        return f"{mode}: frozen base {size(f.checkpoint_shared_bytes)} stored once"
    return mode + FROZEN_SAVES.get(f.frozen, "")


# What a save holds of the frozen arrays, by mode, where none is shared.
FROZEN_SAVES = {
    "rebuild": ": frozen arrays not stored, rebuilt by build_model()",
    "every": ": every array in every save",
}


def _heartbeat(f: PanelFacts, *, ended: bool) -> str:
    if f.lease is None:
        return "heartbeat: no lease yet"
    if ended:
        text = "heartbeat: none since the session ended"
    else:
        age = "—" if f.heartbeat_age_s is None else f"{f.heartbeat_age_s:.0f}s ago"
        text = f"heartbeat: {age}"
        if f.heartbeat_seconds:
            text += f" (every {f.heartbeat_seconds:.0f}s)"
    text += f" · lease {f.lease}"
    if f.session_id:
        text += f" · session {f.session_id}"
    if f.host:
        text += f" on {f.host}"
    if f.heartbeat_failures:
        text += f" · ⚠ {f.heartbeat_failures} failed beat(s)"
    return text


def _event_text(e: Event, now: float, *, ended: bool) -> str:
    # Ended: the clock time (UTC: a Colab VM's clock is, the reader's may not be).
    when = (
        time.strftime("%H:%M:%S UTC", time.gmtime(e.time))
        if ended
        else f"{duration(now - e.time)} ago"
    )
    return f"{when} · {e.kind}: {e.message}"


def duration(seconds: float) -> str:
    """``"42s"``, ``"3m05s"``, ``"2h07m"``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def _num(value: float) -> str:
    return f"{value:.4g}"


def sparkline(values: Sequence[float], width: int = 320, height: int = 60) -> str:
    """An inline SVG polyline of ``values`` (the last 400 at most), or "".

    Its name and its highest and lowest values are written at its right
    edge, so the curve reads without hovering.
    """
    values = [v for v in values if math.isfinite(v)][-400:]
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = width / (len(values) - 1)
    points = " ".join(
        f"{i * step:.1f},{height - 4 - (v - low) / span * (height - 8):.1f}"
        for i, v in enumerate(values)
    )
    label = html.escape(f"loss {_num(values[-1])} (min {_num(low)}, max {_num(high)})")
    full = width + 56  # room for the two values at the right
    text = 'font-size="11" fill="#777" font-family="sans-serif"'
    return (
        f'<svg width="{full}" height="{height}" viewBox="0 0 {full} {height}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{label}</title>'
        f'<rect width="{width}" height="{height}" fill="#fafafa"/>'
        f'<polyline fill="none" stroke="#1e88e5" stroke-width="1.5" '
        f'points="{points}"/>'
        f'<text x="{width + 4}" y="11" {text}>{html.escape(_num(high))}</text>'
        f'<text x="{width + 4}" y="{height // 2 + 4}" {text}>loss</text>'
        f'<text x="{width + 4}" y="{height - 2}" {text}>{html.escape(_num(low))}</text>'
        f"</svg>"
    )

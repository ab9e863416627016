"""The run report: loss over steps, one band per session, deaths and recoveries.

matplotlib is imported only here, only when a report is drawn (the
``report`` extra; Colab has it). The picture:

* each session (lease) is a shaded band over the steps it trained, its
  loss drawn in its own colour;
* a session that ended without stopping cleanly or completing (its last
  recorded step is not followed by a clean end) is marked with a red ✕ —
  a death; the steps the next session had to redo (from its restore point
  back to the dead session's last step) are hatched as a gap;
* in-session recoveries (accelerator lost, reconnected) are dashed lines;
* committed checkpoints are ticks along the bottom.
"""

from __future__ import annotations

import io
from typing import Any

from colab_resume.errors import ColabResumeError
from colab_resume.report.history import RunHistory


class ReportNeedsMatplotlibError(ColabResumeError, ImportError):
    """Drawing the run report needs matplotlib, which is not installed."""


CLEAN_ENDS = ("run.completed", "run.stopped", "run.stopping", "lease.fenced")


def session_spans(history: RunHistory) -> list[dict[str, Any]]:
    """Per lease: first/last step and time, and whether it ended cleanly."""
    spans: dict[int, dict[str, Any]] = {}
    for p in history.points:
        span = spans.setdefault(
            p.lease,
            {"lease": p.lease, "first": p.step, "last": p.step, "t0": p.time},
        )
        span["first"] = min(span["first"], p.step)
        span["last"] = max(span["last"], p.step)
        span["t1"] = p.time
    ends = {e.lease for e in history.events if e.kind in CLEAN_ENDS}
    ordered = [spans[k] for k in sorted(spans)]
    for i, span in enumerate(ordered):
        span["clean"] = span["lease"] in ends
        span["died"] = not span["clean"] and i < len(ordered) - 1
    return ordered


def render(history: RunHistory, *, title: str = "", metric: str = "loss") -> bytes:
    """Draw the report; returns PNG bytes.

    Raises:
        ReportNeedsMatplotlibError: matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError as exc:
        raise ReportNeedsMatplotlibError(
            f"the run report needs matplotlib ({exc}): pip install matplotlib "
            f"(Colab has it)"
        ) from None

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.5), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    spans = session_spans(history)
    colours = [f"C{i % 10}" for i in range(len(spans))]
    for colour, span in zip(colours, spans, strict=True):
        ax.axvspan(span["first"], span["last"], color=colour, alpha=0.08, lw=0)
        points = [
            (p.step, p.metrics[metric])
            for p in history.points
            if p.lease == span["lease"] and metric in p.metrics
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, color=colour, lw=1.2, label=f"session {span['lease']}")
            if span["died"]:
                ax.plot(xs[-1], ys[-1], "x", color="red", ms=10, mew=2)
    for before, after in zip(spans, spans[1:], strict=False):
        if before["died"] and after["first"] < before["last"]:
            ax.axvspan(
                after["first"], before["last"], color="red", alpha=0.12, hatch="//"
            )
        down = after["t0"] - before.get("t1", before["t0"])
        if down > 60:
            ax.annotate(
                f"down {down / 60:.0f} min",
                (after["first"], 1.0),
                xycoords=("data", "axes fraction"),
                fontsize=8,
                va="top",
            )
    for event in history.events:
        if event.kind == "recovery.started" and event.step is not None:
            ax.axvline(event.step, color="orange", ls="--", lw=1)
    ticks = sorted(
        {e.step for e in history.events if e.kind == "checkpoint.committed" and e.step}
    )
    if ticks:
        ax.plot(
            ticks,
            [0.03] * len(ticks),
            "|",
            color="black",
            ms=12,
            mew=2,
            clip_on=False,
            transform=ax.get_xaxis_transform(),
            label="checkpoints",
        )
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(title or "run report")
    if spans:
        ax.legend(loc="upper right", fontsize=8)
    else:
        ax.text(
            0.5, 0.5, "no history recorded yet", ha="center", transform=ax.transAxes
        )
    ax.grid(alpha=0.3)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()

"""The run report: loss over steps, one band per session, deaths and recoveries.

matplotlib is imported only here, only when a report is drawn (the
``report`` extra; Colab has it). It draws a
:class:`~colab_resume.report.sessions.RunReport`, which knows every
session from the run directory's records, not only those with history:

* each session (lease) that trained is a shaded band over the steps it
  trained, from its restore point to the furthest step it reached, its
  loss (where sampled) in its own colour; the legend says how it ended;
* a session that died (killed, VM gone) is marked with a red ✕ at the
  last step it reached, and the steps the next session redid (from its
  restore point to there) are hatched;
* a clean end is drawn as one: a grey square for ``stopped`` (``stop()``,
  SIGTERM, Ctrl-C), an orange triangle for ``taken over``, a black ✕ for
  ``failed``; ``completed`` needs no mark;
* long downtimes are annotated, in-session recoveries are dashed lines,
  committed checkpoints are ticks along the bottom;
* below, the run's wall time as one bar, session after session, each cut
  into productive training and the badput buckets of
  :mod:`colab_resume.report.goodput`, with the goodput in its title.
"""

from __future__ import annotations

import io
from typing import Any

from colab_resume.errors import ColabResumeError
from colab_resume.report import goodput as gp
from colab_resume.report import sessions as ends
from colab_resume.report.sessions import RunReport, Session


class ReportNeedsMatplotlibError(ColabResumeError, ImportError):
    """Drawing the run report needs matplotlib, which is not installed."""


# The mark at a session's last step, by how it ended: (marker, colour).
END_MARKS = {
    ends.DIED: ("x", "red"),
    ends.STOPPED: ("s", "grey"),
    ends.TAKEN_OVER: ("^", "darkorange"),
    ends.FAILED_END: ("X", "black"),
}


def _plain(text: str) -> str:
    """``text`` drawn as written: matplotlib reads a ``$...$`` pair as math
    (a run directory ``/runs/$a$^`` failed to draw), and ``\\$`` is a dollar."""
    return text.replace("$", r"\$")


def render(
    report: RunReport,
    *,
    title: str = "",
    metric: str = "loss",
    goodput: gp.Goodput | None = None,
) -> bytes:
    """Draw the report; returns PNG bytes.

    Args:
        goodput: the report's goodput, where the caller computed it already.

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

    fig = Figure(figsize=(10, 5.6), dpi=100)
    ax, bar = fig.subplots(2, 1, height_ratios=(4.5, 1.1))
    trained = [s for s in report.sessions if s.trained]
    for i, session in enumerate(trained):
        _draw_session(ax, report, session, f"C{i % 10}", metric)
    for before, after in zip(trained, trained[1:], strict=False):
        if before.ended_at is not None and after.started_at is not None:
            down = after.started_at - before.ended_at
            if down > 60 and after.first_step is not None:
                ax.annotate(
                    f"down {down / 60:.0f} min",
                    (after.first_step, 1.0),
                    xycoords=("data", "axes fraction"),
                    fontsize=8,
                    va="top",
                )
    for event in report.history.events:
        if event.kind == "recovery.started" and event.step is not None:
            ax.axvline(event.step, color="orange", ls="--", lw=1)
    if report.commits:
        ax.plot(
            report.commits,
            [0.03] * len(report.commits),
            "|",
            color="black",
            ms=12,
            mew=2,
            clip_on=False,
            transform=ax.get_xaxis_transform(),
            label="checkpoints",
        )
    ax.set_xlabel("step")
    ax.set_ylabel(_plain(metric))
    ax.set_title(_plain(title or "run report"))
    if trained:
        ax.legend(loc="upper right", fontsize=8)
    else:
        ax.text(
            0.5, 0.5, "no history recorded yet", ha="center", transform=ax.transAxes
        )
    ax.grid(alpha=0.3)
    _draw_wall_time(bar, goodput or gp.measure(report))
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def _draw_session(
    ax: Any, report: RunReport, session: Session, colour: str, metric: str
) -> None:
    """One session: its band, its loss, the mark of its end, what was redone."""
    assert session.first_step is not None and session.last_step is not None
    ax.axvspan(session.first_step, session.last_step, color=colour, alpha=0.08, lw=0)
    points = [
        (p.step, p.metrics[metric])
        for p in report.history.points
        if p.lease == session.lease and metric in p.metrics
    ]
    label = _plain(session.describe())
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, color=colour, lw=1.2, label=label)
        if xs[-1] < session.last_step:  # trained on, unsampled: to where it ended
            ax.plot([xs[-1], session.last_step], [ys[-1]] * 2, color=colour, ls=":")
        at: tuple[float, float] = (session.last_step, ys[-1])
        transform = ax.transData
    else:  # no samples survived: the mark sits mid-height on its last step
        ax.plot([], [], color=colour, lw=6, alpha=0.3, label=label)
        at = (session.last_step, 0.5)
        transform = ax.get_xaxis_transform()
    mark = END_MARKS.get(session.end)
    if mark is not None:
        ax.plot(*at, mark[0], color=mark[1], ms=10, mew=2, transform=transform)
    if session.redone:
        ax.axvspan(*session.redone, color="red", alpha=0.12, hatch="//", lw=0)


# A session's segment in about the order its time passed: the downtime
# before it, its start, training (productive time goes after the compile),
# then what is spread over training or came at its end.
BAR_ORDER = [
    gp.RECOVERY,
    gp.TPU_INITIALIZATION,
    gp.TRAINING_PREP,
    gp.RESTORE,
    gp.PROGRAM_STARTUP,
    gp.SAVE,
    gp.WASTED,
    gp.OTHER,
]
# Productive time and each bucket, in the bar's colours.
BAR_COLOURS = {
    "productive": "tab:green",
    gp.RECOVERY: "tab:red",
    gp.WASTED: "salmon",
    gp.TPU_INITIALIZATION: "tab:purple",
    gp.TRAINING_PREP: "plum",
    gp.RESTORE: "tab:blue",
    gp.PROGRAM_STARTUP: "tab:orange",
    gp.SAVE: "gold",
    gp.OTHER: "lightgrey",
}


def _draw_wall_time(ax: Any, result: gp.Goodput) -> None:
    """The run's wall time, one segment per session, cut by where it went."""
    ax.set_yticks([])
    ax.set_xlabel("wall time (s), sessions in order")
    if result.goodput is None or result.total <= 0:
        ax.set_title("goodput: not measured yet", fontsize=9)
        return
    ax.set_title(_plain(result.one_line()), fontsize=9)
    left, shown = 0.0, set()
    for share in result.sessions:
        if left:
            ax.axvline(left, color="black", lw=0.8)
        parts = [(name, share.buckets.get(name, 0.0)) for name in BAR_ORDER]
        parts.insert(
            BAR_ORDER.index(gp.PROGRAM_STARTUP) + 1, ("productive", share.productive)
        )
        for name, seconds in parts:
            if seconds <= 0:
                continue
            label = None if name in shown else name.lower().replace("_", " ")
            shown.add(name)
            ax.barh(0, seconds, left=left, color=BAR_COLOURS[name], label=label)
            left += seconds
    ax.set_xlim(0, max(left, 1e-9))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6), ncol=5, fontsize=7)

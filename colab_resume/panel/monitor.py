"""``cr.panel(run_dir)``: watch a run that trains in another session.

Read only: everything comes from the run directory (the verdict of
:func:`~colab_resume.heartbeat.read_status`, and the history chunks). A
notebook cell keeps it live with :meth:`MonitorPanel.watch`, which
refreshes every few seconds and handles clicks in between (the same
:class:`~colab_resume.panel.pump.KernelPump` as the agent's panel).

**Take over** (after a confirmation) takes the next lease with
``takeover=True`` and releases it at once as "stopped": the holder is
fenced at its next beat or commit, and the next ``fit`` in this notebook
takes the run without waiting for it to be judged dead.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from colab_resume.agent.progress import commit_facts
from colab_resume.events import Event
from colab_resume.heartbeat import RunSession, RunStatus, SessionOptions, read_status
from colab_resume.panel.model import NOTHING_TO_TAKE_OVER, PanelFacts, event_lines, view
from colab_resume.panel.pump import KernelPump
from colab_resume.panel.widgets import PanelBox
from colab_resume.report import event_data, goodput
from colab_resume.report.history import HistoryReader, RunHistory
from colab_resume.report.sessions import read_report
from colab_resume.storage import Storage

ENDED = ("COMPLETED", "FAILED")
# The goodput line reads every session's records: not at every refresh.
GOODPUT_EVERY_SECONDS = 60.0
STATE_BADGES = {
    "NEW": "new",
    "STALLED": "stalled",
    "DEAD": "dead",
    "STOPPED": "stopped",
    "COMPLETED": "completed",
    "FAILED": "failed",
}


class MonitorPanel(PanelBox):
    """The monitor widget; see the module docstring.

    Args:
        run_dir: the run to watch.
        storage_options: passed to fsspec.
        sleep: injectable for tests.
    """

    def __init__(
        self,
        run_dir: str,
        storage_options: dict[str, Any] | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(title=f"colab_resume · watching {run_dir}", read_only=True)
        self.storage = Storage(run_dir, storage_options)
        self.reader = HistoryReader(self.storage)
        self.pump = KernelPump.find()
        self._sleep = sleep
        self.status: RunStatus | None = None
        self.took_over: int | None = None
        self._goodput = ""
        self._goodput_due = 0.0
        self.report_button.on_click(lambda _: self.draw_report())
        self.takeover_button.on_click(lambda _: self.ask_confirmation(True))
        self.cancel_button.on_click(lambda _: self.ask_confirmation(False))
        self.confirm_button.on_click(lambda _: self.take_over())
        self.refresh()

    def refresh(self) -> None:
        """Read the run directory and show what it says."""
        try:
            self.status = read_status(self.storage)
            if time.monotonic() >= self._goodput_due and self.status.lease:
                report = read_report(self.storage, self.reader)
                history = report.history
                self._goodput = goodput.measure(report).one_line()
                self._goodput_due = time.monotonic() + GOODPUT_EVERY_SECONDS
            else:
                history = self.reader.read()
        except Exception as exc:
            self.say(f"cannot read {self.storage.url}: {type(exc).__name__}: {exc}")
            return
        facts = monitor_facts(self.status, history, time.time())
        self.show(view(dataclasses.replace(facts, goodput=self._goodput)))

    def watch(self, seconds: float | None = 3600.0, *, every: float = 5.0) -> str:
        """Refresh every ``every`` seconds until the run ends or ``seconds`` pass.

        Clicks are handled meanwhile. Returns the last verdict.
        """
        deadline = None if seconds is None else time.monotonic() + seconds
        next_refresh = 0.0
        while deadline is None or time.monotonic() < deadline:
            if time.monotonic() >= next_refresh:
                self.refresh()
                next_refresh = time.monotonic() + every
                if self.status is not None and self.status.state in ENDED:
                    break
            if self.pump is not None:
                self.pump.pump()
            if self.took_over is not None:
                break
            self._sleep(0.1)
        return self.status.state if self.status else "unknown"

    def take_over(self) -> None:
        """Fence the holder and free the run for this notebook (after confirming)."""
        self.ask_confirmation(False)
        self.refresh()  # the run may have ended since the panel last looked
        why_not = NOTHING_TO_TAKE_OVER.get(_badge(self.status))
        if why_not is not None:
            self.say(f"not taken over: {why_not}")
            return
        session = RunSession.open(self.storage, SessionOptions(takeover=True))
        session.close("stopped")
        self.took_over = session.lease
        self.say(
            f"took lease {session.lease}: the other session is fenced at its next "
            f"beat or commit. Run your training cell now; it takes the run at once."
        )
        self.refresh()

    def draw_report(self) -> None:
        from colab_resume.report.plot import render
        from colab_resume.report.sessions import read_report

        try:
            report = read_report(self.storage, self.reader)
            self.show_report(render(report, title=self.storage.url))
        except ImportError:
            self.show_report(
                None, "the report needs matplotlib: pip install matplotlib"
            )


def monitor_facts(status: RunStatus, history: RunHistory, now: float) -> PanelFacts:
    """What a reader of the run directory knows, as panel facts."""
    state = _badge(status)
    mine = [p for p in history.points if p.lease == status.lease]
    rate = None
    if len(mine) >= 2 and mine[-1].time > mine[-2].time:
        rate = (mine[-1].step - mine[-2].step) / (mine[-1].time - mine[-2].time)
    commits = [e for e in history.events if e.kind == event_data.COMMITTED]
    committed = [e for e in commits if e.step == status.checkpoint_step]
    commit = commit_facts(committed[-1].data if committed else {})
    if commit["frozen"] is None:  # the run's mode, from its newest commit that says
        modes = [commit_facts(e.data)["frozen"] for e in commits]
        commit["frozen"] = next((m for m in reversed(modes) if m), None)
    events = event_lines(
        Event(e.time, e.kind, e.message, e.level, e.step) for e in history.events
    )
    series = [
        (p.step, p.metrics["loss"]) for p in history.points if "loss" in p.metrics
    ]
    return PanelFacts(
        state=state,
        now=now,
        accelerator=status.accelerator,
        step=status.step,
        steps_per_second=rate if state == "training" else None,
        metrics=dict(history.points[-1].metrics) if history.points else {},
        series=series[-400:],
        checkpoint_step=status.checkpoint_step,
        checkpoint_time=committed[-1].time if committed else None,
        **commit,
        heartbeat_age_s=status.heartbeat_age_s,
        lease=status.lease or None,
        session_id=status.session_id,
        host=status.host,
        events=events,
        detail=f"{status.state}: {status.detail}",
        read_only=True,
    )


def _badge(status: RunStatus | None) -> str:
    """The monitor's state: the verdict, or while alive what the holder says."""
    if status is None:
        return "starting"
    return STATE_BADGES.get(status.state) or (status.holder_state or "training")


def monitor_panel(
    run_dir: str, storage_options: dict[str, Any] | None = None
) -> MonitorPanel:
    return MonitorPanel(run_dir, storage_options)

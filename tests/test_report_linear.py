"""The report is linear in what it reads; ``status`` reads a bounded tail.

20 MB of history naming many sessions made ``read_report`` take 91 s:
every session scanned every event and sample of the run again (and
every later session's start), so the cost grew with sessions × history.
Now the history is indexed by lease once. Proven by counting passes over
the history's lists, not by timing (``bench/bench_report.py`` times it).
"""

from __future__ import annotations

import contextlib
import io
import json
import time

import pytest

from colab_resume.cli import main as cli
from colab_resume.cli import status as status_command
from colab_resume.report import goodput as gp
from colab_resume.report.history import (
    Point,
    RecordedEvent,
    RunHistory,
    chunk_path,
)
from colab_resume.report.sessions import read_report
from colab_resume.storage import Storage
from colab_resume.timings import Timings


class Counted(list):  # type: ignore[type-arg]
    """A list that counts the passes made over it."""

    passes = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.passes += 1
        return super().__iter__()


class Given:
    """A history reader that hands over a history built in memory."""

    def __init__(self, history: RunHistory) -> None:
        self.history = history

    def read(self) -> RunHistory:
        return self.history


def plant_sessions(storage: Storage, count: int, *, t0: float) -> None:
    """``count`` leases, each with its record and a last beat."""
    storage.write_json(
        "run.json", {"run_id": "r", "created_at": t0, "package_version": "0"}
    )
    for lease in range(1, count + 1):
        storage.write_json(
            f"lease/{lease:08d}.json",
            {"lease": lease, "session_id": f"s{lease}", "host": "h", "pid": 1,
             "created_at": t0, "package_version": "0", "heartbeat_seconds": 10.0,
             "dead_after_seconds": 60.0, "stall_after_seconds": 600.0},
        )  # fmt: skip
        storage.write_json(
            f"heartbeat/{lease:08d}.json",
            {"session_id": f"s{lease}", "host": "h", "lease": lease, "beat": 3,
             "state": "stopped" if lease % 2 else "training", "step": lease * 10,
             "progress_at": t0, "since_progress_s": 0.0, "written_at": t0},
        )  # fmt: skip


def history_of(count: int, t0: float) -> RunHistory:
    """Five samples and five events per session, and a tally each."""
    points, events = Counted(), Counted()
    for lease in range(1, count + 1):
        for i in range(5):
            step = lease * 10 - 5 + i
            points.append(Point(step, t0 + step, {"loss": 1.0}, lease))
            kind = "run.resumed_at" if i == 0 else "checkpoint.committed"
            events.append(RecordedEvent(t0 + step, kind, "info", step, "", lease))
    timings = {n: Timings(steps=9, step_seconds=0.9, saves=3, save=0.3)
               for n in range(1, count + 1)}  # fmt: skip
    return RunHistory(points=points, events=events, timings=timings)


def passes(tmp_path, sessions: int) -> tuple[int, int]:
    """Passes over the events and over the samples, report and goodput."""
    t0 = time.time() - 3600
    storage = Storage(str(tmp_path / f"run-{sessions}"))
    plant_sessions(storage, sessions, t0=t0)
    history = history_of(sessions, t0)
    report = read_report(storage, Given(history))  # type: ignore[arg-type]
    assert len(report.sessions) == sessions
    result = gp.compute(report)
    assert result.goodput is not None
    return history.events.passes, history.points.passes  # type: ignore[attr-defined]


def test_the_report_passes_over_the_history_a_fixed_number_of_times(tmp_path):
    few, many = passes(tmp_path, 8), passes(tmp_path, 32)
    assert few == many, f"passes over (events, samples): {few} for 8, {many} for 32"
    assert max(many) <= 8


def test_sessions_are_the_leases_the_run_has(tmp_path):
    """A history naming 500 leases in a run of 2 makes 2 sessions, and a
    problem that says so."""
    t0 = time.time() - 3600
    storage = Storage(str(tmp_path / "run"))
    plant_sessions(storage, 2, t0=t0)
    for lease in range(1, 501):
        storage.write_json(
            chunk_path(lease, 0),
            {"format": 1, "lease": lease, "seq": 0, "session_id": f"s{lease}",
             "written_at": t0, "points": [[lease, t0 + lease, {"loss": 1.0}]],
             "events": [{"time": t0 + lease, "kind": "checkpoint.committed",
                         "level": "info", "step": lease, "message": ""}]},
        )  # fmt: skip
    report = read_report(storage)
    assert [s.lease for s in report.sessions] == [1, 2]
    [problem] = [p for p in report.problems if "above the newest lease" in p]
    assert "498 lease(s)" in problem and "from 3" in problem
    assert gp.measure(report).sessions  # still measured, from the two


@pytest.mark.parametrize("budget", [1, 10**9])
def test_status_reads_the_newest_history_within_its_budget(
    tmp_path, monkeypatch, budget
):
    t0 = time.time() - 3600
    run_dir = str(tmp_path / "run")
    storage = Storage(run_dir)
    plant_sessions(storage, 6, t0=t0)
    for lease in range(1, 7):
        storage.write_json(
            chunk_path(lease, 0),
            {"format": 1, "lease": lease, "seq": 0, "session_id": f"s{lease}",
             "written_at": t0, "points": [], "events": [],
             "timings": {"steps": 9, "step_seconds": 0.9, "saves": 3, "save": 0.3}},
        )  # fmt: skip
    read: list[str] = []
    original = Storage.read_bytes

    def counted(self, path, *args, **kwargs):  # type: ignore[no-untyped-def]
        read.append(path)
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(Storage, "read_bytes", counted)
    monkeypatch.setattr(status_command, "HISTORY_TAIL_BYTES", budget)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli(["status", run_dir, "--json"]) == 0
    figure = json.loads(out.getvalue())["goodput"]
    chunks_read = [p for p in read if p.startswith("history/")]
    records_read = {p for p in read if p.startswith(("lease/", "heartbeat/"))}
    if budget == 1:  # at least the newest chunk, never more than fits
        assert chunks_read == [chunk_path(6, 0)]
        assert figure["history_chunks_left_out"] == 5
        # The sessions are the tail's: older leases' records are not read.
        assert records_read == {"lease/00000006.json", "heartbeat/00000006.json"}
    else:
        assert len(chunks_read) == 6 and figure["history_chunks_left_out"] == 0
        assert len(records_read) == 12

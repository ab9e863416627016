"""No figure derived from the run directory can stop a session or a reader.

A history chunk is written by whoever can write the run directory: an
older version, a session cut off mid-tally, a collaborator's mistake. Its
tally of steps and saves feeds goodput and ``save_every="auto"``; one
showing steps and saves where no step was kept made the cadence
arithmetic divide by zero, and every later ``"auto"`` session ended
FAILED before its first step while ``colab-resume report`` exited with a
traceback. The arithmetic is now total (zero, tiny, huge, negative, NaN,
infinite), and every caller treats a failure there as "not measured".
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import time

import pytest
from support import wait_for
from support.processes import run_cli
from support.toy import tiny_fit_parts

from colab_resume.checkpoint.cadence import AutoCadence, Evidence, young_interval
from colab_resume.heartbeat.liveness import DEAD, read_status
from colab_resume.report import goodput as gp
from colab_resume.report.history import RunHistory, chunk_path
from colab_resume.report.sessions import DIED, RunReport, Session
from colab_resume.storage import Storage
from colab_resume.timings import Timings, mean_save


def plant_dead_session_with_a_tally(run_dir: str, tally: dict) -> None:
    """Lease 1, killed before it trained a step (its beat names none), and
    a history chunk whose tally shows steps and saves: no step kept."""
    storage = Storage(run_dir)
    now = time.time()
    storage.write_json(
        "run.json", {"run_id": "r", "created_at": now, "package_version": "0"}
    )
    storage.write_json(
        "lease/00000001.json",
        {
            "lease": 1,
            "session_id": "planted",
            "host": "h",
            "pid": 1,
            "created_at": now,
            "package_version": "0",
            "heartbeat_seconds": 0.2,
            "dead_after_seconds": 0.8,
            "stall_after_seconds": 600.0,
        },
    )
    storage.write_json(
        "heartbeat/00000001.json",
        {
            "session_id": "planted",
            "host": "h",
            "lease": 1,
            "beat": 3,
            "state": "training",
            "step": None,
            "progress_at": None,
            "since_progress_s": 0.0,
            "written_at": now,
        },
    )
    storage.write_json(
        chunk_path(1, 0),
        {
            "format": 1,
            "lease": 1,
            "seq": 0,
            "session_id": "planted",
            "written_at": now,
            "points": [],
            "events": [],
            "timings": tally,
        },
    )


NO_STEP_KEPT = {"steps": 10, "step_seconds": 1.0, "saves": 2, "save": 0.2}


def test_a_tally_with_no_step_kept_stops_neither_report_nor_an_auto_session(
    tmp_path,
):
    """The issue's record, planted; a real ``colab-resume report`` and a
    real ``save_every="auto"`` fit on the same run directory."""
    pytest.importorskip("tensorflow", reason="the agent trains with it here")

    import colab_resume as cr

    run_dir = str(tmp_path / "run")
    plant_dead_session_with_a_tally(run_dir, NO_STEP_KEPT)
    wait_for(lambda: read_status(Storage(run_dir)).state == DEAD, 30, "lease 1 dead")

    out = str(tmp_path / "report.png")
    shown = run_cli("report", run_dir, "-o", out, expect_rc=0).stdout
    assert "Traceback" not in shown
    assert "goodput" in shown and "session 1: died" in shown

    build_model, data = tiny_fit_parts()  # a Dense(1), 8 batches an epoch

    def make_dataset(epoch: int):
        return data

    agent = cr.Agent(run_dir, prefer="cpu", save_every="auto")
    agent.fit(build_model, make_dataset, epochs=1, steps_per_epoch=4, verbose=0)
    assert agent.progress().step == 4
    assert agent.status().state == "COMPLETED"


# --- the arithmetic, swept -----------------------------------------------------------

AWKWARD = [
    0.0,
    1e-300,
    5e-324,
    1e-9,
    1.0,
    1e9,
    1e300,
    -1.0,
    -1e300,
    math.nan,
    math.inf,
    -math.inf,
]
COUNTS = [0, 1, 3, 10**12]


def _finite_or_none(value: float | None) -> bool:
    return value is None or math.isfinite(value)


@pytest.mark.parametrize(("cost", "between"), list(itertools.product(AWKWARD, AWKWARD)))
def test_youngs_interval_is_total(cost, between):
    interval = young_interval(cost, between)
    assert interval is None or (math.isfinite(interval) and interval >= 0)


@pytest.mark.parametrize(
    ("seconds", "saves", "setup", "firsts"),
    list(itertools.product(AWKWARD, COUNTS, AWKWARD[:8:3], COUNTS[:3])),
)
def test_the_price_of_a_save_is_total(seconds, saves, setup, firsts):
    price = mean_save(seconds, saves, setup, firsts)
    assert price is None or (math.isfinite(price) and price >= 0)


def awkward_tallies():
    """Tallies built in memory (past the parser, which refuses them) with
    every field in turn at every awkward value, and the issue's."""
    yield Timings(**NO_STEP_KEPT)  # type: ignore[arg-type]
    for field, value in itertools.product(
        ("step_seconds", "save", "save_setup", "first_step", "connect", "paused"),
        AWKWARD,
    ):
        yield Timings(steps=5, saves=3, first_saves=1, **{field: value})
    for field, count in itertools.product(
        ("steps", "saves", "first_saves", "first_steps", "recoveries"), COUNTS
    ):
        yield Timings(step_seconds=1.0, save=0.3, **{field: count})


def sessions(start: float, end: float, first: int | None, last: int | None):
    return [
        Session(1, started_at=start, ended_at=end, first_step=first, last_step=last,
                end=DIED),
        Session(2, started_at=end + 5, ended_at=end + 50, first_step=first,
                last_step=None if last is None else last + 4),
    ]  # fmt: skip


@pytest.mark.parametrize("tally", list(awkward_tallies()))
@pytest.mark.parametrize(
    "shape",
    [(0.0, 0.0, None, None), (100.0, 100.0, 0, 0), (100.0, 200.0, 0, 50),
     (1e300, 1e300, 0, 10**12)],
)  # fmt: skip
def test_goodput_and_the_auto_cadence_are_total(tally, shape):
    report = RunReport(
        "memory://run",
        RunHistory(timings={1: tally, 2: tally}),
        sessions(*shape),
        [],
        [],
    )
    result = gp.compute(report)
    assert _finite_or_none(result.goodput)
    assert all(math.isfinite(v) for v in result.buckets.values())
    assert result.one_line() and result.table()
    json.dumps(result.to_json(), allow_nan=False)

    evidence = gp.evidence_of(report, lease=2)
    choice = AutoCadence(evidence, tally, floor=1.0, ceiling=3600.0).choose()
    assert math.isfinite(choice.seconds) and 1.0 <= choice.seconds <= 3600.0
    assert choice.describe()


@pytest.mark.parametrize("value", AWKWARD)
def test_evidence_of_any_value_gives_an_interval_within_bounds(value):
    evidence = Evidence(
        training=value, failures=3, save_seconds=value, saves=4, save_setup=value,
        first_saves=1,
    )  # fmt: skip
    for now in (Timings(), Timings(step_seconds=value, save=value, saves=2)):
        choice = AutoCadence(evidence, now, floor=2.0, ceiling=600.0).choose()
        assert math.isfinite(choice.seconds) and 2.0 <= choice.seconds <= 600.0


def test_readers_say_not_measured_where_the_arithmetic_fails(tmp_path, monkeypatch):
    """The arithmetic is total now, so its failure is injected (a stand-in:
    no real record makes it fail any more); ``report``, ``status`` and an
    ``"auto"`` session's evidence each carry on and say so."""
    from colab_resume.cli import main

    run_dir = str(tmp_path / "run")
    plant_dead_session_with_a_tally(run_dir, NO_STEP_KEPT)

    def broken(report):  # type: ignore[no-untyped-def]
        raise ArithmeticError("planted")

    monkeypatch.setattr(gp, "compute", broken)
    for command in (
        ["status", run_dir],
        ["report", run_dir, "-o", str(tmp_path / "r.png")],
    ):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert main(command) == 0
        assert "goodput: not measured (ArithmeticError: planted)" in out.getvalue()
    # No training or failure figure; the saves' own tally still counts.
    evidence = gp.evidence_before(Storage(run_dir), lease=2)
    assert (evidence.training, evidence.failures, evidence.saves) == (0.0, 0, 2)

"""Goodput from the run directory: the arithmetic, the records, a real run.

The arithmetic is checked on hand-made session records (every figure is
known); the records on real history chunks; the whole on a real training
process SIGKILLed mid-run and run again, read back through the CLI.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import pytest
from support.processes import run_cli, train_agent

from colab_resume import procfs
from colab_resume import timings as timings_module
from colab_resume.errors import CorruptRecordError
from colab_resume.events import EventLog
from colab_resume.report import goodput as gp
from colab_resume.report.history import (
    HistoryRecorder,
    Point,
    RecordedEvent,
    RunHistory,
    read_history,
)
from colab_resume.report.sessions import (
    COMPLETED_END,
    DIED,
    STOPPED,
    RunReport,
    Session,
)
from colab_resume.storage import Storage
from colab_resume.timings import StepClock, Timings


def report(
    sessions: list[Session], timings: dict[int, Timings], **history
) -> RunReport:
    return RunReport(
        "memory://run", RunHistory(timings=timings, **history), sessions, [], []
    )


def tally(**fields: float) -> Timings:
    return Timings(**fields)  # type: ignore[arg-type]


# Two sessions: the first dies at step 1,000 (last seen 900, the second
# restores 800: 100 steps redone as far as seen), 30 s after its last sign
# the second starts (2 s connect, 1 s wait), and completes at 2,000.
DEATH = [
    Session(
        lease=1, started_at=1000.0, ended_at=1100.0, first_step=0, last_step=900,
        end=DIED, redone=(800, 900),
    ),
    Session(
        lease=2, started_at=1133.0, ended_at=1200.0, first_step=800, last_step=2000,
        end=COMPLETED_END,
    ),
]  # fmt: skip
DEATH_TIMINGS = {
    1: tally(connect=3.0, wait=0.5, build=2.0, restore=0.0, first_step=5.1,
             first_steps=1, step_seconds=8.99, steps=899, save=1.8, saves=9),
    2: tally(connect=2.0, wait=1.0, build=2.0, restore=1.5, first_step=4.05,
             first_steps=1, step_seconds=11.99, steps=1199, save=2.4, saves=12),
}  # fmt: skip


def test_every_second_of_wall_time_is_in_one_bucket():
    result = gp.compute(report(DEATH, DEATH_TIMINGS))
    # Session 1 began 3.5 s before its lease; session 2 began 3 s before
    # its lease: 30 s after session 1 was last seen.
    assert result.total == pytest.approx((1100 - 996.5) + 30 + (1200 - 1130))
    assert result.productive + sum(result.buckets.values()) == pytest.approx(
        result.total
    )
    step = 0.01
    assert result.ideal_step == pytest.approx((8.99 + 11.99) / (899 + 1199))
    assert result.buckets[gp.WASTED] == pytest.approx(100 * step)
    assert result.buckets[gp.RECOVERY] == pytest.approx(30 + 0.5 + 1.0)
    assert result.buckets[gp.TPU_INITIALIZATION] == pytest.approx(5.0)
    assert result.buckets[gp.TRAINING_PREP] == pytest.approx(4.0)
    assert result.buckets[gp.RESTORE] == pytest.approx(1.5)
    assert result.buckets[gp.SAVE] == pytest.approx(4.2)
    # The first step's excess over a steady step: 5.09 + 4.04.
    assert result.buckets[gp.PROGRAM_STARTUP] == pytest.approx(9.13)
    # Productive: every step trained once, 2,000 of them, at each
    # session's own step time.
    assert result.productive == pytest.approx(800 * step + 1200 * step)
    assert result.goodput == pytest.approx(result.productive / result.total)
    # After a death the loss is known only as far as the last beat.
    assert gp.WASTED in result.at_least and gp.RECOVERY in result.at_most
    line = result.one_line()
    assert line.startswith(f"goodput {result.goodput:.1%} of ")
    assert "downtime ≤" in line and "redone ≥" in line


def test_a_scripts_own_start_is_training_prep_and_moves_its_session_start():
    """A script's interpreter and imports before the agent (``launch``) are
    the run's time: the first session starts that much earlier, and after a
    death the split moves from downtime to start-up, the total unchanged."""
    plain = gp.compute(report(DEATH, DEATH_TIMINGS))
    launched = {
        1: dataclasses.replace(DEATH_TIMINGS[1], launch=4.0),
        2: dataclasses.replace(DEATH_TIMINGS[2], launch=6.0),
    }
    result = gp.compute(report(DEATH, launched))
    assert result.total == pytest.approx(plain.total + 4.0)
    assert result.buckets[gp.TRAINING_PREP] == pytest.approx(4.0 + 4.0 + 6.0)
    assert result.buckets[gp.RECOVERY] == pytest.approx(30 + 0.5 + 1.0 - 6.0)
    assert result.productive == pytest.approx(plain.productive)


def test_time_a_killed_session_trained_past_its_last_beat_is_not_downtime_too():
    """Session 1 beat last at step 900 but committed 1,400 before it died
    (its successor restored that): its steps to 1,400 are known trained,
    which stretches it past its last beat, and the gap after it shrinks by
    as much. The run's total stays the wall time from its first start to
    its last sign; counted in both, the total would exceed it."""
    trained_on = [
        dataclasses.replace(DEATH[0], last_step=1400, redone=None),
        dataclasses.replace(DEATH[1], first_step=1400),
    ]
    result = gp.compute(report(trained_on, DEATH_TIMINGS))
    assert result.total == pytest.approx(1200 - 996.5)
    assert result.productive == pytest.approx(2000 * 0.01)
    # Session 1 is 1,400 steps of 0.01 s plus its start-up: 3.5 s + 2 s
    # build + 5.09 s compile + 1.8 s saves = 26.39 s of 103.5 s wall; the
    # 500 steps past its beat (5 s) are inside its wall, not beyond it.
    assert result.buckets[gp.RECOVERY] == pytest.approx(30 + 0.5 + 1.0)
    stretched = [
        dataclasses.replace(DEATH[0], ended_at=1010.0, last_step=1400, redone=None),
        dataclasses.replace(DEATH[1], first_step=1400),
    ]
    result = gp.compute(report(stretched, DEATH_TIMINGS))
    # Seen last 13.5 s after its start, it needed 26.39 s for what it did:
    # it lived until 1022.89 at least, and the gap before session 2 (which
    # began at 1130) is 107.11 s, not 120 s.
    assert result.total == pytest.approx(1200 - 996.5)
    assert result.buckets[gp.RECOVERY] == pytest.approx(1130 - 1022.89 + 0.5 + 1.0)


def test_a_tally_of_a_sessions_first_steps_prices_only_those():
    """Session 2 was killed long after its first history chunk, whose tally
    covers its first 30 steps (just after the restore: 6 ms each); it trained
    1,000. Those 30 count at their measured time, the other 970 at the
    run's ideal step (session 1's steady 5 ms), not all at 6 ms."""
    sessions = [
        Session(
            lease=1, started_at=1000.0, ended_at=1100.0, first_step=0,
            last_step=10_000, end=DIED,
        ),
        Session(
            lease=2, started_at=1101.0, ended_at=1110.0, first_step=10_000,
            last_step=11_000, end=COMPLETED_END,
        ),
    ]  # fmt: skip
    timings = {
        1: tally(step_seconds=50.0, steps=10_000),
        2: tally(step_seconds=0.18, steps=30),
    }
    result = gp.compute(report(sessions, timings))
    ideal = 50.18 / 10_030
    assert result.ideal_step == pytest.approx(ideal)
    second = result.sessions[1]
    assert second.productive == pytest.approx(0.18 + 970 * ideal)


def test_a_process_counts_its_launch_once_and_a_kernel_never(monkeypatch):
    monkeypatch.setattr(timings_module, "_launch_counted", False)
    age = timings_module.script_launch_seconds()
    started = procfs.started_at()
    assert started is not None  # Linux: /proc is there
    assert 0 < age <= time.time() - started + 1.0
    assert timings_module.script_launch_seconds() == 0.0  # once a process
    monkeypatch.setattr(timings_module, "_launch_counted", False)
    monkeypatch.setattr(timings_module, "in_kernel", lambda: True)
    assert timings_module.script_launch_seconds() == 0.0


def test_sub_second_steps_get_a_figure():
    """A small Colab model steps in milliseconds: the ideal step time is the
    mean of every measured step, not a filter that drops short ones."""
    sessions = [
        Session(
            lease=1, started_at=0.0, ended_at=10.0, first_step=0, last_step=4000,
            end=COMPLETED_END,
        )
    ]  # fmt: skip
    result = gp.compute(
        report(
            sessions,
            {1: tally(first_step=1.0, first_steps=1, step_seconds=7.998, steps=3999)},
        )  # fmt: skip
    )
    assert result.ideal_step == pytest.approx(0.002)
    assert result.goodput == pytest.approx(4000 * 0.002 / 10.0)


def test_time_after_a_clean_stop_and_paused_time_are_left_out():
    sessions = [
        Session(lease=1, started_at=0.0, ended_at=100.0, first_step=0,
                last_step=1000, end=STOPPED),
        Session(lease=2, started_at=4000.0, ended_at=4100.0, first_step=1000,
                last_step=2000, end=COMPLETED_END),
    ]  # fmt: skip
    timings = {
        1: tally(step_seconds=50.0, steps=1000, paused=40.0),
        2: tally(step_seconds=100.0, steps=1000),
    }
    result = gp.compute(report(sessions, timings))
    assert result.idle == pytest.approx(3900.0)
    assert result.paused == pytest.approx(40.0)
    assert result.total == pytest.approx(60.0 + 100.0)
    assert result.deaths == 0 and result.cadence is None
    assert not result.at_least and not result.at_most


def test_steps_redone_after_an_in_session_recovery_count_as_wasted():
    sessions = [
        Session(lease=1, started_at=0.0, ended_at=100.0, first_step=0,
                last_step=1000, end=COMPLETED_END),
    ]  # fmt: skip
    events = [
        RecordedEvent(10.0, "recovery.started", "warning", 600, "lost", 1),
        RecordedEvent(12.0, "run.resumed_at", "info", 500, "resumed", 1),
    ]
    timings = {
        1: tally(step_seconds=55.0, steps=1100, recovery=2.0, saves=10, save=1.0)
    }
    result = gp.compute(report(sessions, timings, events=events))
    assert result.recoveries == 1
    assert result.buckets[gp.WASTED] == pytest.approx(100 * 0.05)
    assert result.productive == pytest.approx(1000 * 0.05)
    assert result.buckets[gp.RECOVERY] == pytest.approx(2.0)
    assert result.cadence is not None and result.cadence.failures == 1


def test_the_best_fixed_cadence_is_youngs_and_never_loses_more():
    result = gp.compute(report(DEATH, DEATH_TIMINGS))
    cadence = result.cadence
    assert cadence is not None
    cost = (1.8 + 2.4) / 21
    between = (result.productive + result.buckets[gp.WASTED]) / 1
    assert cadence.save_seconds == pytest.approx(cost)
    assert cadence.interval == pytest.approx(math.sqrt(2 * cost * between))
    assert cadence.steps == round(cadence.interval / result.ideal_step)
    assert cadence.best_lost <= cadence.lost
    assert cadence.goodput >= result.goodput
    table = "\n".join(result.table())
    assert f"a save every {cadence.steps:,} steps" in table
    assert "WASTED_PROGRESS_FROM_DISRUPTION" in table and "at least" in table


def test_a_run_of_an_older_version_gets_its_step_time_from_the_samples():
    sessions = [
        Session(lease=1, started_at=0.0, ended_at=100.0, first_step=0,
                last_step=100, end=COMPLETED_END),
    ]  # fmt: skip
    points = [Point(s, 5.0 + s * 0.5, {"loss": 1.0}, 1) for s in (1, 10, 50, 100)]
    result = gp.compute(report(sessions, {}, points=points))
    assert result.ideal_step == pytest.approx(0.5)
    assert result.goodput == pytest.approx(100 * 0.5 / 100)
    assert any("no tally" in note for note in result.notes)


def test_no_steps_no_figure():
    sessions = [Session(lease=1, started_at=0.0, ended_at=5.0)]
    result = gp.compute(report(sessions, {}))
    assert result.goodput is None
    assert "not measured yet" in result.one_line()


def test_the_step_clock_splits_steps_saves_and_pauses():
    now = [0.0]
    timings = Timings()
    clock = StepClock(timings, clock=lambda: now[0])
    clock.started()
    for step in range(1, 5):
        now[0] += 3.0 if step == 1 else 1.0  # the first step compiles
        clock.step_ended()
        if step == 3:
            now[0] += 0.5
            clock.saved(0.5)
        now[0] += 0.01  # the agent's own duties
        clock.duty_ended()
    assert timings.first_steps == 1
    assert timings.first_step == pytest.approx(3.01)
    assert timings.steps == 3
    assert timings.step_seconds == pytest.approx(3 * 1.01)
    assert timings.save == pytest.approx(0.5) and timings.saves == 1
    assert timings.save_setup == pytest.approx(0.5) and timings.first_saves == 1


def test_what_saves_pay_once_is_told_apart():
    """The first save after each build sets up what later ones reuse, and
    an epoch's first save takes its data fingerprint: the tally keeps both
    apart (inside ``save``) so a cadence can leave them out."""
    timings = Timings()
    clock = StepClock(timings, clock=lambda: 0.0)
    clock.started()
    for seconds in (0.06, 0.001, 0.002):
        clock.saved(seconds)
    clock.saved(0.041, setup=0.04)  # a new epoch's fingerprint
    clock.started()  # a rebuild after an accelerator loss
    clock.saved(0.05, setup=0.04)
    clock.saved(0.001)
    assert timings.saves == 6 and timings.first_saves == 2
    assert timings.save_setup == pytest.approx(0.06 + 0.04 + 0.05)
    assert timings.save == pytest.approx(0.155)


def test_history_chunks_carry_the_tally_and_the_newest_wins(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    recorder = HistoryRecorder(EventLog())
    recorder.start(storage, 1, "abc")
    recorder.timings = Timings(steps=10, step_seconds=1.0)
    recorder.flush(wait=True)
    recorder.flush(wait=True)  # nothing new: no chunk
    recorder.timings.steps = 20
    recorder.flush(wait=True)
    assert len(os.listdir(tmp_path / "run" / "history")) == 2
    history = read_history(storage)
    assert history.timings[1].steps == 20 and not history.problems


@pytest.mark.parametrize(
    "bad", [[], {"steps": -1}, {"save": "1"}, {"steps": 1.5}, {"save": 1e300}]
)
def test_a_damaged_tally_is_named_never_trusted(bad):
    with pytest.raises(CorruptRecordError, match="timings"):
        Timings.parse(bad, "history/00000001-000000.json")


def test_a_tally_from_a_newer_writer_keeps_what_it_knows():
    parsed = Timings.parse({"steps": 3, "future_field": 1}, "chunk")
    assert parsed.steps == 3


def test_a_killed_run_reports_its_goodput_everywhere(tmp_path):
    """SIGKILL mid-run, run again: the status line, its JSON and the report
    table name the death's cost, and every bucket adds up."""
    run = str(tmp_path / "run")
    first = train_agent(
        run, str(tmp_path / "a.npz"), "--kill-at-step", "20",
        "--tick-seconds", "0.05", expect_rc=-9,
    )  # fmt: skip
    assert "KILLING at step 20" in first.stdout  # the kill landed in training
    train_agent(run, str(tmp_path / "b.npz"), "--tick-seconds", "0.05")

    status = run_cli("status", run, "--json", expect_rc=0)
    found = json.loads(status.stdout)["goodput"]
    assert found["deaths"] == 1
    assert 0 < found["goodput"] < 1
    parts = found["productive_seconds"] + sum(found["badput_seconds"].values())
    assert parts == pytest.approx(found["total_seconds"])
    badput = found["badput_seconds"]
    # The second session measured its own start: connect, build, restore,
    # the first step's compile, saves.
    for bucket in (
        gp.TPU_INITIALIZATION, gp.TRAINING_PREP, gp.RESTORE, gp.PROGRAM_STARTUP,
        gp.SAVE, gp.RECOVERY,
    ):  # fmt: skip
        assert badput[bucket] > 0, bucket
    assert found["at_least"] == [gp.WASTED]

    line = run_cli("status", run, expect_rc=0).stdout
    assert f"goodput {found['goodput']:.1%}" in line

    pytest.importorskip(
        "matplotlib", reason="the report picture needs the [report] extra"
    )
    table = run_cli("report", run, "-o", str(tmp_path / "r.png"), expect_rc=0).stdout
    assert "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION" in table
    assert "ideal step" in table

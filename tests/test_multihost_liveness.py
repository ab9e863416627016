"""A multi-process run's liveness: one verdict for the slice, each host named.

Per-process beats (``heartbeat/<lease>.p<k>.json``) are written here as the
agent's processes write them (colab_resume.agent.multihost), in a local run
directory; a stale one is made by setting its modification time back, the
server clock a local store judges by.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import colab_resume as cr
from colab_resume.heartbeat import RunSession, SessionOptions, liveness
from colab_resume.protocol import rundir
from colab_resume.storage import Storage


def process_beat(
    run: Path, lease: int, k: int, *, state: str = "training", age: float = 0.0
) -> None:
    path = run / rundir.process_heartbeat_path(lease, k)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "process": k,
        "processes": 2,
        "lease": lease,
        "host": f"worker-{k}",
        "pid": 100 + k,
        "step": 40 + k,
        "state": state,
        "seq": 3,
        "time": time.time(),
    }
    path.write_text(json.dumps(record))
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))


def slice_run(tmp_path: Path) -> tuple[Path, RunSession]:
    run = tmp_path / "run"
    session = RunSession.open(Storage(str(run)), SessionOptions(heartbeat_seconds=5))
    session.update(state="training", step=40)
    session.writer._beat()
    return run, session


def test_one_stale_host_makes_the_run_dead_and_names_it(tmp_path: Path) -> None:
    run, session = slice_run(tmp_path)
    dead_after = cr.inspect(str(run)).dead_after_s
    assert dead_after is not None
    process_beat(run, 1, 0)
    process_beat(run, 1, 1, age=dead_after + 30)
    status = cr.inspect(str(run))
    assert status.state == liveness.DEAD
    assert "process 1 on worker-1" in status.detail
    # Process 0's own beat is fresh, but it cannot go on alone: the lines
    # say what the run line says.
    assert [b.verdict for b in status.processes] == ["dead", "dead"]
    assert "cannot go on alone" in status.processes[0].why
    session.close()


def test_host_lines_follow_a_dead_holder_at_once_and_carry_the_runs_step(
    tmp_path: Path,
) -> None:
    """The coordinator's beat went silent while the per-process beats are
    still young: DEAD on every line, not "alive" for four more beats."""
    run, session = slice_run(tmp_path)
    session.writer.stop()
    process_beat(run, 1, 0)
    process_beat(run, 1, 1)
    status = cr.inspect(str(run))
    assert status.state == liveness.ALIVE
    assert [b.step for b in status.processes] == [40, 41]  # none behind the run
    dead_after = status.dead_after_s
    assert dead_after is not None
    old = time.time() - dead_after - 30
    for path in (rundir.heartbeat_path(1), rundir.lease_path(1)):
        os.utime(run / path, (old, old))
    status = cr.inspect(str(run))
    assert status.state == liveness.DEAD, status.detail
    assert [b.verdict for b in status.processes] == ["dead", "dead"]
    session.close()


def test_every_host_fresh_is_alive(tmp_path: Path) -> None:
    run, session = slice_run(tmp_path)
    process_beat(run, 1, 0)
    process_beat(run, 1, 1)
    status = cr.inspect(str(run))
    assert status.state == liveness.ALIVE, status.detail
    assert [(b.process, b.host, b.verdict) for b in status.processes] == [
        (0, "worker-0", "alive"),
        (1, "worker-1", "alive"),
    ]
    session.close()


def test_a_host_that_left_to_restart_is_dead_at_once(tmp_path: Path) -> None:
    """Process 0 exited 75 after its peer died: no need to wait out a beat."""
    run, session = slice_run(tmp_path)
    process_beat(run, 1, 0, state="restart")
    process_beat(run, 1, 1)
    assert cr.inspect(str(run)).state == liveness.DEAD
    session.close()


def test_a_host_that_never_beat_is_dead_once_the_lease_is_old(tmp_path: Path) -> None:
    run, session = slice_run(tmp_path)
    process_beat(run, 1, 0)
    assert cr.inspect(str(run)).state == liveness.ALIVE  # lease young: starting
    old = time.time() - 3600
    os.utime(run / rundir.lease_path(1), (old, old))
    status = liveness.read_status(Storage(str(run)), dead_after_seconds=1e9)
    assert status.state == liveness.ALIVE  # the caller's threshold rules
    status = cr.inspect(str(run))
    assert status.state == liveness.DEAD and "process 1 never beat" in status.detail
    session.close()


def test_a_taking_session_takes_a_slice_with_a_dead_host_at_once(
    tmp_path: Path,
) -> None:
    """The same rule for the next session: it does not wait on process 0's
    fresh beat when process 1 is dead."""
    run, session = slice_run(tmp_path)
    process_beat(run, 1, 0)
    process_beat(run, 1, 1, age=3600)

    def countdown(left: float, who: str) -> None:
        raise AssertionError("waited on a slice with a dead host")

    taker = RunSession.open(
        Storage(str(run)), SessionOptions(heartbeat_seconds=5), on_countdown=countdown
    )
    assert taker.lease == 2
    taker.close()
    session.close()


@pytest.mark.parametrize("stale", [False, True])
def test_status_cli_lists_each_process(
    tmp_path: Path, stale: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from colab_resume.cli import main

    run, session = slice_run(tmp_path)
    process_beat(run, 1, 0)
    process_beat(run, 1, 1, age=3600 if stale else 0)
    assert main(["status", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[0] == ("DEAD" if stale else "ALIVE")
    want = "DEAD " if stale else "ALIVE"  # process 0 cannot go on alone
    assert any(
        line.startswith(f"  process 0: {want} host worker-0  step 40") for line in lines
    ), lines
    assert any(
        line.startswith(f"  process 1: {want} host worker-1  step 41") for line in lines
    ), lines
    assert main(["status", str(run), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [p["verdict"] for p in shown["processes"]] == (
        ["dead", "dead"] if stale else ["alive", "alive"]
    )
    session.close()

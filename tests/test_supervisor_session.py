"""A supervisor is a session of its own, and its limits are the run's.

Real processes: supervisors are the CLI in subprocesses, the run's holder
is tests/workers/agent_worker.py (TensorFlow on the CPU), every death is a
real SIGKILL or SIGTERM. Commands that must fail to start a session are
small Python one-liners that count their calls in a file.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time

import pytest
from support.faultproxy import FaultMix, path_contains
from support.processes import Process, cli, python_path, train_agent
from support.waiting import wait_for

from colab_resume.heartbeat import liveness
from colab_resume.heartbeat.lease import read_lease
from colab_resume.launch import supervisor_records as records
from colab_resume.launch.supervise import GAVE_UP, Limits, Supervisor, read_relaunches
from colab_resume.protocol import rundir
from colab_resume.retry import RetryPolicy
from colab_resume.storage import Storage

pytestmark = pytest.mark.timeout(600)

AGENT_WORKER = os.path.join(os.path.dirname(__file__), "workers", "agent_worker.py")


def environment() -> dict[str, str]:
    return {"PYTHONPATH": python_path()}


def supervisor(run_dir: str, relaunch: str, *extra: str) -> Process:
    return cli(
        "supervise", run_dir, "--relaunch", relaunch,
        "--interval", "0.3", "--start-timeout", "120", *extra,
        env=environment(),
    )  # fmt: skip


def failing_command(calls) -> str:
    """A relaunch that starts no session: it counts its call and exits 3."""
    code = f"open({str(calls)!r}, 'a').write('x\\n'); raise SystemExit(3)"
    return shlex.join([sys.executable, "-c", code])


def dead_run(tmp_path) -> str:
    """A run whose only session SIGKILLed itself at step 3."""
    run_dir = str(tmp_path / "run")
    train_agent(run_dir, str(tmp_path / "out.npz"), "--kill-at-step", "3", expect_rc=-9)
    assert liveness.read_status(Storage(run_dir)).state == liveness.DEAD
    return run_dir


def test_limits_are_the_runs_and_a_restarted_supervisor_inherits_them(tmp_path):
    """--max-per-day 1: one relaunch, then the supervisor gives up; started
    again (a new process, a new record) it still gives up, relaunching
    nothing, because the run's records hold the day's relaunch. Likewise a
    restarted supervisor with --max-failed-starts 1 counts the run's last
    failed start and relaunches nothing."""
    run_dir = dead_run(tmp_path)
    calls = tmp_path / "calls"
    command = failing_command(calls)
    first = supervisor(
        run_dir, command, "--max-per-day", "1", "--max-failed-starts", "5"
    ).finish(GAVE_UP, timeout=120)
    assert "relaunched 1 times in the last 24 hours" in first.stdout, first.stdout
    assert calls.read_text().count("x") == 1
    again = supervisor(
        run_dir, command, "--max-per-day", "1", "--max-failed-starts", "5"
    ).finish(GAVE_UP, timeout=120)
    assert "relaunched 1 times in the last 24 hours" in again.stdout, again.stdout
    assert calls.read_text().count("x") == 1, "a restarted supervisor relaunched"
    third = supervisor(
        run_dir, command, "--max-per-day", "10", "--max-failed-starts", "1"
    ).finish(GAVE_UP, timeout=120)
    assert "last 1 relaunches in a row started no session" in third.stdout
    assert calls.read_text().count("x") == 1
    assert [r["supervisor"] for r in read_relaunches(Storage(run_dir))] == [1]


def test_a_session_that_dies_before_its_first_checkpoint_is_a_failed_start(tmp_path):
    """Each relaunch takes the lease, then its session dies at step 1, long
    before its first checkpoint (step 5), as an out-of-memory at the first
    step would: a failed start each time, so --max-failed-starts 2 ends
    supervision after two relaunches instead of relaunching for ever."""
    run_dir = dead_run(tmp_path)
    command = shlex.join(
        [sys.executable, AGENT_WORKER, run_dir, str(tmp_path / "r.npz"),
         "--kill-at-step", "1"]
    )  # fmt: skip
    result = supervisor(
        run_dir, command, "--max-failed-starts", "2", "--started-after", "300"
    ).finish(GAVE_UP, timeout=400)
    assert "before its first checkpoint" in result.stdout, result.stdout
    assert "last 2 relaunches in a row started no session" in result.stdout
    relaunches = read_relaunches(Storage(run_dir))
    assert [(r.get("lease"), r["started"]) for r in relaunches] == [
        (2, False),
        (3, False),
    ], relaunches


def judged(run_dir: str, number: int) -> str:
    return records.judge_supervisor(Storage(run_dir), number).state


def test_dead_closed_or_unreadable_newer_supervisors_never_stop_the_live_one(
    tmp_path,
):
    """Supervisor 1 watches a live run. Newer records appear: 2 planted with
    a beat an hour old, 3 unreadable, 4 a real supervisor SIGKILLed (silent
    past its promise), 5 a real supervisor stopped with SIGTERM (closed).
    When the run dies, supervisor 1 names each and relaunches; it does not
    end "superseded"."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out.npz")
    holder = Process(
        [sys.executable, AGENT_WORKER, run_dir, out, "--hang-at-step", "2"],
        env=environment(),
    )
    storage = Storage(run_dir)
    calls = tmp_path / "calls"
    command = failing_command(calls)
    others: list[Process] = []
    try:
        wait_for(
            lambda: liveness.read_status(storage).lease == 1, 180, "the holder's lease"
        )
        live = supervisor(run_dir, command, "--max-failed-starts", "1")
        wait_for(lambda: judged(run_dir, 1) == records.ALIVE, 60, "supervisor 1")
        planted = os.path.join(run_dir, rundir.supervisor_path(2))
        with open(planted, "w") as f:
            json.dump({"dead_after_seconds": 10, "pid": 1}, f)
        hour_ago = time.time() - 3600
        os.utime(planted, (hour_ago, hour_ago))
        with open(os.path.join(run_dir, rundir.supervisor_path(3)), "w") as f:
            f.write("{not json")
        killed = supervisor(run_dir, command)
        others.append(killed)
        wait_for(lambda: judged(run_dir, 4) == records.ALIVE, 60, "supervisor 4")
        killed.kill()
        closed = supervisor(run_dir, command)
        others.append(closed)
        wait_for(lambda: judged(run_dir, 5) == records.ALIVE, 60, "supervisor 5")
        closed.popen.send_signal(signal.SIGTERM)
        closed.finish(130, timeout=60)
        assert judged(run_dir, 5) == records.CLOSED
        wait_for(lambda: judged(run_dir, 4) == records.DEAD, 120, "4 judged dead")
        os.kill(read_lease(storage, 1).pid, signal.SIGKILL)
        result = live.finish(GAVE_UP, timeout=120)
    finally:
        holder.kill()
        for other in others:
            other.kill()
    for line in (
        "supervisor 2 is DEAD",
        "supervisor 3 is UNREADABLE",
        "supervisor 4 is DEAD",
        "supervisor 5 is CLOSED",
    ):
        assert line in result.stdout, result.stdout
    assert "took this run over" not in result.stdout
    assert calls.read_text().count("x") == 1
    assert [r["supervisor"] for r in read_relaunches(storage)] == [1]


def test_storage_faults_in_the_supervisors_loop_are_waited_out(
    tmp_path, gcs_run_dir, emulator, fault_proxy
):
    """A run dead on the GCS emulator; once the supervisor holds its record,
    every request under supervisor/ (its listing of newer supervisors and
    of the run's relaunches, its relaunch record, its beats) fails with
    503 through the fault proxy, past the storage retry's budget, eight
    times. The supervisor says so and retries, then relaunches (a command
    that starts no session) and gives up by its limit: never an exit on the
    fault. In-process (the Supervisor class, as the CLI runs it): the
    budget is cut to 2 attempts here so a fault reaches the loop at once."""
    out = str(tmp_path / "out.npz")
    train_agent(
        gcs_run_dir, out, "--kill-at-step", "3", endpoint=emulator.url, expect_rc=-9
    )
    storage = Storage(
        gcs_run_dir,
        {"token": "anon", "endpoint_url": fault_proxy.url, "requests_timeout": 2.0},
        retry=RetryPolicy(total_seconds=1.0, initial_seconds=0.1, max_attempts=2),
    )
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("supervisor 1 of"):
            fault_proxy.set_mix(
                FaultMix(
                    error_rate=1.0,
                    statuses=(503,),
                    match=path_contains("supervisor"),
                    max_faults=8,
                )
            )

    calls = tmp_path / "calls"
    code = Supervisor(
        storage,
        failing_command(calls),
        limits=Limits(failed_starts=1, interval=0.3, start_seconds=60),
        say=say,
    ).run()
    assert code == GAVE_UP, said
    assert fault_proxy.faults() == 8, fault_proxy.counts
    assert any(line.startswith("storage fault") for line in said), said
    assert calls.read_text().count("x") == 1
    relaunches = read_relaunches(
        Storage(gcs_run_dir, {"token": "anon", "endpoint_url": emulator.url})
    )
    assert [r["started"] for r in relaunches] == [False], relaunches

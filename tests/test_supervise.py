"""``colab-resume supervise``: a dead run relaunched through the user's command.

Real processes throughout: the supervisor is the CLI in a subprocess, the
relaunch command starts tests/workers/agent_worker.py (TensorFlow, a
2-replica MirroredStrategy on the CPU) on a local run directory, and every
death is a SIGKILL of the training process its lease names. The cloud CLIs
(``gcloud colab executions create``, ``kaggle kernels push``) cannot run
here: where a test uses one, it is a stand-in script on ``PATH`` that
records its arguments and starts the same local training script.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import stat
import sys

import pytest
from support.compare import assert_bitwise_equal
from support.processes import WORKERS, Process, cli, python_path, train_agent
from support.waiting import wait_for

from colab_resume.cli.report import relaunch_lines
from colab_resume.heartbeat import liveness
from colab_resume.heartbeat.lease import read_lease
from colab_resume.launch.supervise import GAVE_UP, SUPERSEDED, read_relaunches
from colab_resume.protocol import rundir
from colab_resume.storage import Storage

pytestmark = pytest.mark.timeout(600)

TOTAL_STEPS = 36  # the worker's 3 epochs x 12 steps
AGENT_WORKER = os.path.join(WORKERS, "agent_worker.py")


def training_command(run_dir: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, AGENT_WORKER, run_dir, out, "--step-sleep", "0.15", *extra]


def environment(**more: str) -> dict[str, str]:
    return {"PYTHONPATH": python_path(), **more}


def supervisor(run_dir: str, relaunch: str, *extra: str, env: dict | None = None):
    return cli(
        "supervise",
        run_dir,
        "--relaunch",
        relaunch,
        "--interval",
        "0.3",
        "--start-timeout",
        "180",
        # A relaunched session proves it started by beating a second: the
        # kills below may land before its first checkpoint.
        "--started-after",
        "1",
        *extra,
        env=env or environment(),
    )


def status(run_dir: str) -> liveness.RunStatus:
    return liveness.read_status(Storage(run_dir))


def kill_holder_at(run_dir: str, lease: int, step: int) -> int:
    """SIGKILL lease ``lease``'s process once its beat reaches ``step``;
    returns the step it had reached (a kill during training: below the end)."""
    storage = Storage(run_dir)

    def reached() -> int | None:
        now = liveness.read_status(storage)
        if (
            now.lease == lease
            and now.state == liveness.ALIVE
            and (now.step or 0) >= step
        ):
            return now.step
        return None

    at = wait_for(reached, 180, f"lease {lease} training past step {step}")
    os.kill(read_lease(storage, lease).pid, signal.SIGKILL)
    assert at < TOTAL_STEPS, at
    return at


def test_a_run_killed_three_times_is_relaunched_each_time_and_ends_bitwise(tmp_path):
    """The first session is started by hand; the supervisor relaunches the
    same command after each of three SIGKILLs at random steps. The run ends
    COMPLETED, bitwise equal to an uninterrupted one, with four leases one
    after the other: each relaunch came after its session died, never
    beside it."""
    reference = str(tmp_path / "reference.npz")
    train_agent(str(tmp_path / "ref"), reference)
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out.npz")
    command = training_command(run_dir, out)
    first = Process(command, env=environment())  # started by hand
    wait_for(lambda: status(run_dir).state == liveness.ALIVE, 180, "lease 1")
    watcher = supervisor(run_dir, shlex.join(command))
    try:
        rng = random.Random()
        killed_at = []
        for lease in (1, 2, 3):
            restored = status(run_dir).checkpoint_step or 0
            target = min(restored + rng.randint(2, 6), TOTAL_STEPS - 4)
            killed_at.append(kill_holder_at(run_dir, lease, target))
        result = watcher.finish(0, timeout=300)
    finally:
        first.kill()
        watcher.kill()
    assert "the run is COMPLETED" in result.stdout, result.stdout
    assert_bitwise_equal(reference, out, where="supervised run vs uninterrupted")
    relaunches = read_relaunches(Storage(run_dir))
    assert [(r["after_lease"], r.get("lease")) for r in relaunches] == [
        (1, 2),
        (2, 3),
        (3, 4),
    ], relaunches
    said = relaunch_lines(Storage(run_dir))  # what `colab-resume report` prints
    assert len(said) == 3 and "after lease 1 died: lease 2 took the run" in said[0]
    leases = sorted(os.listdir(os.path.join(run_dir, rundir.LEASE_DIR)))
    assert leases == [f"{n:08d}.json" for n in (1, 2, 3, 4)]
    assert all(0 < step < TOTAL_STEPS for step in killed_at), killed_at


@pytest.mark.parametrize("ending", ["completed", "stopped"])
def test_a_completed_or_stopped_run_is_never_relaunched(tmp_path, ending):
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out.npz")
    if ending == "completed":
        train_agent(run_dir, out)
    else:
        train_agent(run_dir, out, "--stop-at-step", "5", expect_rc=5)
    marker = tmp_path / "relaunched"
    relaunch = shlex.join([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    result = supervisor(run_dir, relaunch).finish(None, timeout=120)
    assert result.returncode == (0 if ending == "completed" else 5), result.stdout
    assert not marker.exists()
    assert read_relaunches(Storage(run_dir)) == []


def dead_run(tmp_path) -> str:
    """A run whose only session SIGKILLed itself at step 3."""
    run_dir = str(tmp_path / "run")
    train_agent(run_dir, str(tmp_path / "out.npz"), "--kill-at-step", "3", expect_rc=-9)
    assert status(run_dir).state == liveness.DEAD
    return run_dir


def test_a_relaunch_that_starts_no_session_stops_after_its_limit(tmp_path):
    """A command that fails at once (printing a token), then one that hangs:
    each is a failed start, reported with its exit status and its output,
    redacted; after --max-failed-starts of them in a row the supervisor
    gives up (exit 8) instead of looping, and the hanging one is stopped."""
    run_dir = dead_run(tmp_path)
    failing = shlex.join(
        [
            sys.executable,
            "-c",
            "print('auth failed for token ya29.a0AfB_secretsecretsecret')\n"
            "raise SystemExit(3)",
        ]
    )
    result = supervisor(run_dir, failing, "--max-failed-starts", "2").finish(
        GAVE_UP, timeout=120
    )
    assert "exited with status 3 before a session took the run" in result.stdout
    assert "last 2 relaunches in a row started no session" in result.stdout
    assert "auth failed for token" in result.stdout
    assert "secretsecret" not in result.stdout
    assert len(read_relaunches(Storage(run_dir))) == 2
    pid_file = tmp_path / "hung.pid"
    hanging = shlex.join(
        [
            sys.executable,
            "-c",
            f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
            "time.sleep(600)",
        ]
    )
    # The run's two failed starts count for this supervisor too: a third
    # makes three in a row.
    result = supervisor(
        run_dir, hanging, "--max-failed-starts", "3", "--start-timeout", "3"
    ).finish(GAVE_UP, timeout=120)
    assert "no session took the run within 3s" in result.stdout, result.stdout
    assert "last 3 relaunches in a row started no session" in result.stdout
    hung = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(hung, 0)  # stopped, not left behind


def stand_in(bin_dir, name: str, calls) -> None:
    """A stand-in for a cloud CLI on PATH: records its arguments, then
    starts the command in COLAB_RESUME_TEST_TRAIN (the local training)."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, shlex, sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "argv = shlex.split(os.environ['COLAB_RESUME_TEST_TRAIN'])\n"
        "os.execv(argv[0], argv)\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_two_supervisors_race_and_only_the_newest_relaunches(tmp_path):
    """Two supervisors watch one run through a (stand-in) ``gcloud colab
    executions create``; when the run dies the older one finds itself
    superseded and ends (exit 9) without relaunching, and the newer one
    relaunches once; the run completes."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out.npz")
    holder = Process(
        training_command(run_dir, out, "--hang-at-step", "4"), env=environment()
    )
    calls = tmp_path / "gcloud-calls.jsonl"
    stand_in(tmp_path / "bin", "gcloud", calls)
    env = environment(
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        COLAB_RESUME_TEST_TRAIN=shlex.join(training_command(run_dir, out)),
    )
    relaunch = (
        "gcloud colab executions create --display-name=night-run "
        "--notebook-runtime-template=t4 --gcs-notebook-uri=gs://b/train.ipynb"
    )
    storage = Storage(run_dir)
    wait_for(lambda: status(run_dir).state == liveness.ALIVE, 180, "the first session")
    older = supervisor(run_dir, relaunch, env=env)
    try:
        wait_for(lambda: storage.exists(rundir.supervisor_path(1)), 60, "supervisor 1")
        newer = supervisor(run_dir, relaunch, env=env)
        wait_for(lambda: storage.exists(rundir.supervisor_path(2)), 60, "supervisor 2")
        kill_holder_at(run_dir, 1, 4)
        assert older.finish(SUPERSEDED, timeout=120)
        result = newer.finish(0, timeout=300)
    finally:
        holder.kill()
        older.kill()
    assert "the run is COMPLETED" in result.stdout
    lines = calls.read_text().splitlines()
    assert len(lines) == 1, lines
    assert json.loads(lines[0])[:3] == ["colab", "executions", "create"]
    relaunches = read_relaunches(storage)
    assert [(r["supervisor"], r.get("lease")) for r in relaunches] == [(2, 2)]

"""Proof of death on the same host: a rerun on the holder's machine takes the
run at once when the holder's process is gone, and never when it still runs.

Real processes throughout: holders are ``tests/workers/holder.py`` children
killed with SIGKILL (or stopped with SIGSTOP, alive but silent), identities
come from this machine's ``/proc``. A holder "on another VM" is a real holder
whose lease names another boot id (the worker's ``--identity other-boot``):
no second machine exists here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from support import Process, run_cli, wait_for, worker
from support.processes import WORKERS, python_path

from colab_resume import procfs
from colab_resume.errors import RunInUseError
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.heartbeat.lease import read_lease
from colab_resume.heartbeat.process import ProcessIdentity, proof_of_death, this_process
from colab_resume.protocol import rundir
from colab_resume.protocol.records import LeaseRecord, to_json
from colab_resume.storage import Storage

HERE = this_process()
# Elsewhere leases carry no identity and the heartbeat rule alone applies
# (tests/test_heartbeat.py). On Linux an unreadable /proc fails these tests.
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="proof of death reads Linux's /proc"
)


def holder(run_dir: str, *args: str, endpoint: str | None = None) -> Process:
    where = ("--endpoint", endpoint) if endpoint else ()
    proc = worker("holder", run_dir, *where, *args)
    proc.expect("READY")
    return proc


def took_over(session: RunSession) -> dict:
    (event,) = session.events.recent(kind="lease.previous_dead")
    return event.data


def test_sigkilled_holder_is_taken_over_at_once_with_default_beats(
    gcs_run_dir, emulator, gcs_options
):
    """Default beats (10 s, dead after 40 s): without the proof this waits ~40 s."""
    storage = Storage(gcs_run_dir, gcs_options)
    proc = holder(gcs_run_dir, "--heartbeat", "10", endpoint=emulator.url)
    pid = proc.pid
    proc.kill()
    started = time.monotonic()
    session = RunSession.open(storage, SessionOptions())
    try:
        waited = time.monotonic() - started
        assert waited < 3.0, waited
        data = took_over(session)
        assert data["process_gone"] is True
        assert data["reason"].startswith(f"holder process {pid} on this host is gone")
        assert not session.events.recent(kind="lease.waiting")
        assert read_lease(storage, 2).took_over_from == 1
        # The new lease names this process, for the rerun after it.
        mine = read_lease(storage, 2)
        assert HERE is not None
        assert (mine.boot_id, mine.pid_namespace) == (HERE.boot_id, HERE.pid_namespace)
        assert (mine.pid, mine.start_ticks) == (os.getpid(), HERE.start_ticks)
    finally:
        session.close()


def test_local_run_directory_and_cli_status_say_dead_at_once(tmp_path):
    run_dir = str(tmp_path / "run")
    proc = holder(run_dir, "--heartbeat", "10")
    pid = proc.pid
    alive = run_cli("status", run_dir, "--json")
    assert json.loads(alive.stdout)["state"] == "ALIVE", alive
    proc.kill()
    dead = run_cli("status", run_dir, "--json")
    status = json.loads(dead.stdout)
    assert (dead.returncode, status["state"]) == (0, "DEAD"), dead
    assert f"holder process {pid} on this host is gone" in status["detail"]
    assert status["heartbeat_age_s"] < 40  # DEAD by proof, not by silence
    started = time.monotonic()
    session = RunSession.open(Storage(run_dir), SessionOptions())
    try:
        # At once by proof: far below the heartbeat rule's dead_after (40 s).
        assert time.monotonic() - started < 15
        assert took_over(session)["process_gone"] is True
    finally:
        session.close()


def test_live_silent_holder_is_watched_and_taken_once_its_process_dies(
    gcs_run_dir, emulator, gcs_options
):
    """SIGSTOP: alive on this host but silent. Its process still exists, so it
    is not taken early; killed during the wait, it is taken at the next poll."""
    storage = Storage(gcs_run_dir, gcs_options)
    proc = holder(
        gcs_run_dir, "--heartbeat", "0.5", "--dead-after", "20", endpoint=emulator.url
    )
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        countdown: list[float] = []
        opened: list[RunSession | BaseException] = []

        def take() -> None:
            try:
                opened.append(
                    RunSession.open(
                        storage,
                        SessionOptions(heartbeat_seconds=0.5),
                        on_countdown=lambda left, who: countdown.append(left),
                    )
                )
            except BaseException as exc:
                opened.append(exc)

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        wait_for(lambda: countdown, 30, "the takeover's countdown")
        assert taker.is_alive() and not opened, opened  # still waiting
        left = countdown[-1]
        assert left > 10, countdown  # the heartbeat rule's wait
        proc.kill()
        killed = time.monotonic()
        taker.join(timeout=left + 10)
        (session,) = opened
        assert isinstance(session, RunSession), session
        # One poll (1 s) after the kill, not the heartbeat rule's wait: the
        # session says why it took over, and it did so well before ``left``.
        assert took_over(session)["process_gone"] is True
        assert time.monotonic() - killed < left / 2, (left, countdown)
        session.close()
    finally:
        proc.kill()


def test_live_holder_on_this_host_is_refused(gcs_run_dir, emulator, gcs_options):
    storage = Storage(gcs_run_dir, gcs_options)
    proc = holder(gcs_run_dir, "--heartbeat", "0.4", endpoint=emulator.url)
    try:
        before = {o.path for o in storage.list()}
        with pytest.raises(RunInUseError, match="still beating"):
            RunSession.open(storage, SessionOptions(heartbeat_seconds=0.4))
        assert {o.path for o in storage.list()} == before
    finally:
        proc.kill()


@pytest.mark.parametrize("identity", ["other-boot", "none"])
def test_holder_on_another_vm_or_an_old_version_is_judged_by_its_beats(
    tmp_path, identity
):
    """Another boot id (another VM), or a lease without an identity (older
    versions): no proof, so the new session waits out dead_after."""
    run_dir = str(tmp_path / "run")
    proc = holder(
        run_dir, "--heartbeat", "0.4", "--dead-after", "2", *("--identity", identity)
    )
    proc.kill()
    started = time.monotonic()
    session = RunSession.open(Storage(run_dir), SessionOptions(heartbeat_seconds=0.4))
    try:
        # dead_after (2 s) and polls, with room for a loaded machine.
        assert time.monotonic() - started < 12
        data = took_over(session)
        assert data["process_gone"] is False
        assert "no heartbeat for" in data["reason"]
        assert session.events.recent(kind="lease.waiting")  # it did wait
    finally:
        session.close()


def test_holder_in_another_pid_namespace_is_never_judged_by_pid(tmp_path):
    """A container: same kernel and boot id, its own pid namespace (and /proc).
    The holder is pid 1 there; read in our namespace pid 1 is init with
    another start time, which must not pass for "the holder is gone"."""
    unshare = shutil.which("unshare")
    argv = [unshare or "unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
    argv.append("--map-root-user")
    if unshare is None or subprocess.run([*argv, "true"]).returncode != 0:
        pytest.skip("needs unshare and unprivileged user namespaces to make one")
    run_dir = str(tmp_path / "run")
    script = os.path.join(WORKERS, "holder.py")
    proc = Process(
        [*argv, sys.executable, script, run_dir, "--heartbeat", "0.4"],
        env={"PYTHONPATH": python_path()},
    )
    try:
        proc.expect("READY", timeout=60)
        storage = Storage(run_dir)
        lease = read_lease(storage, 1)
        assert HERE is not None
        assert lease.boot_id == HERE.boot_id and lease.pid == 1
        assert lease.pid_namespace != HERE.pid_namespace
        status = run_cli("status", run_dir, "--json")
        assert json.loads(status.stdout)["state"] == "ALIVE", status
        with pytest.raises(RunInUseError, match="still beating"):
            RunSession.open(storage, SessionOptions(heartbeat_seconds=0.4))
    finally:
        proc.kill()


def this_process_of(pid: int) -> ProcessIdentity:
    """Another process on this machine, named as its lease would name it."""
    assert HERE is not None
    found = procfs.stat(pid)
    assert found is not None
    return ProcessIdentity(
        HERE.host, HERE.boot_id, HERE.pid_namespace, pid, found.start_ticks
    )


def write_holder(storage: Storage, identity: ProcessIdentity) -> None:
    """Lease 1 and a fresh 'training' beat naming ``identity`` as holder."""
    now = time.time()
    storage.write_json(
        rundir.RUN_RECORD, {"run_id": "r", "created_at": now, "package_version": "0"}
    )
    lease = LeaseRecord(
        lease=1,
        session_id="old",
        host=identity.host,
        pid=identity.pid,
        created_at=now,
        package_version="0",
        heartbeat_seconds=30.0,
        dead_after_seconds=120.0,
        stall_after_seconds=600.0,
        boot_id=identity.boot_id,
        pid_namespace=identity.pid_namespace,
        start_ticks=identity.start_ticks,
    )
    storage.write_json(rundir.lease_path(1), to_json(lease))
    beat = {
        "session_id": "old",
        "host": identity.host,
        "lease": 1,
        "beat": 1,
        "state": "training",
        "step": 3,
        "progress_at": now,
        "since_progress_s": 0.0,
        "written_at": now,
    }
    storage.write_json(rundir.heartbeat_path(1), beat)


def lease_naming(identity: ProcessIdentity) -> LeaseRecord:
    storage = Storage(f"memory://runs/{uuid.uuid4().hex}")
    write_holder(storage, identity)
    return read_lease(storage, 1)


def test_pid_reused_by_a_later_process_is_not_the_holder():
    """A live process has the holder's pid but started at another time."""
    assert HERE is not None
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        live = this_process_of(sleeper.pid)
        assert proof_of_death(lease_naming(live), HERE) is None  # the holder runs
        reused = ProcessIdentity(**{**vars(live), "start_ticks": live.start_ticks - 1})
        why = proof_of_death(lease_naming(reused), HERE)
        assert why == (
            f"holder process {sleeper.pid} on this host is gone "
            f"(pid {sleeper.pid} is now another process)"
        )
        # A session takes such a run at once, although the beat is fresh.
        storage = Storage(f"memory://runs/{uuid.uuid4().hex}")
        write_holder(storage, reused)
        started = time.monotonic()
        session = RunSession.open(storage, SessionOptions(heartbeat_seconds=30))
        assert time.monotonic() - started < 10  # not the beat's 120 s
        assert took_over(session)["reason"].startswith(why)
        session.close()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_killed_holder_not_yet_reaped_is_gone():
    """A zombie (SIGKILLed, its parent has not waited yet) runs no code."""
    assert HERE is not None
    sleeper = subprocess.Popen(["sleep", "30"])
    identity = this_process_of(sleeper.pid)
    sleeper.send_signal(signal.SIGKILL)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the kernel needs a moment
            why = proof_of_death(lease_naming(identity), HERE)
            if why:
                break
            time.sleep(0.01)
        assert why and "zombie" in why
        assert sleeper.poll() is not None  # reaped only now
        assert "zombie" not in (proof_of_death(lease_naming(identity), HERE) or "")
        assert proof_of_death(lease_naming(identity), HERE)
    finally:
        sleeper.wait()


def test_other_host_boot_or_namespace_proves_nothing():
    assert HERE is not None
    gone = ProcessIdentity(**{**vars(HERE), "pid": 2**22 + 7})  # above pid_max
    assert proof_of_death(lease_naming(gone), HERE)
    for field, value in (
        ("host", "another-vm"),
        ("boot_id", str(uuid.uuid4())),
        ("pid_namespace", HERE.pid_namespace + 1),
    ):
        elsewhere = ProcessIdentity(**{**vars(gone), field: value})
        assert proof_of_death(lease_naming(elsewhere), HERE) is None, field
    assert proof_of_death(lease_naming(gone), None) is None  # no /proc here


def test_the_countdown_shows_in_the_log_and_the_panel(tmp_path, caplog):
    """The agent waiting on a silent holder on another VM: a log line every
    few seconds (not every poll) and a panel that redraws the seconds left."""
    import colab_resume as cr
    from colab_resume.panel.model import facts_of, view

    run_dir = str(tmp_path / "run")
    proc = holder(
        run_dir,
        "--heartbeat",
        "0.5",
        "--dead-after",
        "3",
        *("--identity", "other-boot"),
    )
    proc.kill()
    agent = cr.Agent(run_dir, heartbeat_seconds=0.5)
    badges: list[str] = []
    agent.on_progress(lambda: badges.append(view(facts_of(agent.progress())).badge))
    caplog.set_level("WARNING", logger="colab_resume.events")
    session, manager = agent._loop.take_run()
    try:
        lines = [
            r.getMessage() for r in caplog.records if "lease.waiting" in r.getMessage()
        ]
        # 3 s of waiting, polled every 0.15 s: a line every 0.75 s, not 20.
        assert 2 <= len(lines) <= 5, lines
        assert all("waiting up to" in line for line in lines)
        seconds = [
            int(b.rsplit(" ", 1)[1].rstrip("s"))
            for b in badges
            if "taking over in" in b
        ]
        assert len(seconds) >= 2 and seconds == sorted(seconds, reverse=True), badges
        assert agent.progress().state != "waiting"
    finally:
        manager.close()
        session.close()


def test_default_beats_bound_a_new_vm_rerun_to_45_seconds():
    options = SessionOptions()
    assert options.heartbeat_seconds == 10 and options.dead_after <= 45

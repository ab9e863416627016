"""Leases, heartbeats, fencing and liveness on the GCS emulator, with real kills."""

from __future__ import annotations

import time

import pytest
from support import Process, worker
from support import wait_for as wait_until
from support.starting import start_together

import colab_resume as cr
from colab_resume.errors import FencedError, RunInUseError
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.heartbeat.lease import read_lease
from colab_resume.protocol import rundir
from colab_resume.protocol.listing import RunListing, read_leases
from colab_resume.storage import Storage

BEAT = 0.4
DEAD_AFTER = 2.0


def wait_for(predicate, timeout: float):
    return wait_until(predicate, timeout, "the run's status", interval=0.1)


def holder(run_dir: str, endpoint: str, *args: str) -> Process:
    return worker("holder", run_dir, "--endpoint", endpoint, *args)


@pytest.fixture
def storage(gcs_run_dir, gcs_options) -> Storage:
    return Storage(gcs_run_dir, gcs_options)


def start_holder(gcs_run_dir, emulator, *args: str):
    proc = holder(
        gcs_run_dir,
        emulator.url,
        "--heartbeat",
        str(BEAT),
        "--dead-after",
        str(DEAD_AFTER),
        *args,
    )
    proc.expect("READY")
    return proc


def test_lease_race_between_processes_has_exactly_one_winner(
    gcs_run_dir, emulator, storage, tmp_path
):
    """Five processes race for a new run at the same instant: one wins."""
    go = tmp_path / "go"
    racers = [
        holder(
            gcs_run_dir,
            emulator.url,
            *("--mode", "race", "--heartbeat", str(BEAT), "--go", str(go)),
        )
        for _ in range(5)
    ]
    try:
        start_together(racers, go)
        outcomes = [racer.expect("", timeout=60) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()
    winners = [line for line in outcomes if line.startswith("WON")]
    losers = [line for line in outcomes if line.startswith("LOST")]
    assert len(winners) == 1, outcomes
    assert len(losers) == 4, outcomes
    for line in losers:
        assert "takeover=True" in line  # the refusal says what to do
    assert [number for number, _ in read_leases(storage)] == [1]


def test_holder_is_fenced_within_one_beat_and_stops_writing(
    gcs_run_dir, emulator, storage
):
    proc = start_holder(gcs_run_dir, emulator)
    try:
        old_beat = rundir.heartbeat_path(1)
        beat_before = storage.read_json(old_beat)["beat"]
        taker = RunSession.open(
            storage, SessionOptions(heartbeat_seconds=BEAT, takeover=True)
        )
        line = proc.expect("FENCED", timeout=60)
        assert "lease 2" in line
        # Counted in beats, not seconds (a loaded machine stretches seconds):
        # the first beat to check the leases after lease 2 exists fences the
        # holder without writing. Only beats that had checked before can
        # land: the one landing as we read, and the one in flight then.
        beat_after = storage.read_json(old_beat)["beat"]
        assert beat_after <= beat_before + 2, (beat_before, beat_after)
        before = storage.info(old_beat).updated
        others_before = {
            o.path: o.updated for o in storage.list() if "00000002" not in o.path
        }
        time.sleep(4 * BEAT)
        assert storage.info(old_beat).updated == before
        others_after = {
            o.path: o.updated for o in storage.list() if "00000002" not in o.path
        }
        assert others_after == others_before
        taker.close()
    finally:
        proc.kill()


def test_fence_check_before_commit_raises(gcs_run_dir, emulator, storage):
    first = RunSession.open(storage, SessionOptions(heartbeat_seconds=5.0))
    second = RunSession.open(
        Storage(gcs_run_dir, {"token": "anon", "endpoint_url": emulator.url}),
        SessionOptions(heartbeat_seconds=5.0, takeover=True),
    )
    with pytest.raises(FencedError, match="lease 2"):
        first.fence()  # well before its next beat
    with pytest.raises(FencedError):
        first.complete()
    assert not storage.exists(rundir.DONE_RECORD)
    second.close()
    first.close()


def test_alive_then_dead_within_bound_after_sigkill(gcs_run_dir, emulator, gcs_options):
    # A holder on another VM: no proof of death from here, only its silence.
    proc = start_holder(gcs_run_dir, emulator, "--identity", "other-boot")
    try:
        status = wait_for(
            lambda: (s := cr.inspect(gcs_run_dir, gcs_options)).step and s, timeout=10
        )
        assert status.state == "ALIVE"
        assert status.lease == 1 and status.session_id and status.host
        assert status.heartbeat_age_s is not None and status.heartbeat_age_s < 2
    finally:
        proc.kill()
    killed = time.monotonic()
    wait_for(lambda: cr.inspect(gcs_run_dir, gcs_options).state == "DEAD", timeout=15)
    detected = time.monotonic() - killed
    # docs/DESIGN.md §6.4: DEAD within dead_after + one beat (+ one status poll).
    assert detected <= DEAD_AFTER + BEAT + 0.5, detected
    assert detected >= DEAD_AFTER - BEAT - 1.0, detected  # not before it could know


def test_beating_without_progress_is_stalled(gcs_run_dir, emulator, gcs_options):
    proc = start_holder(
        gcs_run_dir, emulator, "--mode", "stall", "--stall-after", "1.0"
    )
    try:
        status = wait_for(
            lambda: (
                (s := cr.inspect(gcs_run_dir, gcs_options)).state == "STALLED" and s
            ),
            timeout=10,
        )
        assert status.heartbeat_age_s < DEAD_AFTER
        assert "not moved" in status.detail
    finally:
        proc.kill()


def test_completed_after_done(storage, gcs_run_dir, gcs_options):
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=BEAT))
    session.update(state="training", step=10)
    session.complete({"final_step": 10})
    status = cr.inspect(gcs_run_dir, gcs_options)
    assert status.state == "COMPLETED"
    assert storage.read_json(rundir.DONE_RECORD)["final_step"] == 10


def test_new_run_directory_is_new(gcs_run_dir, gcs_options):
    status = cr.inspect(gcs_run_dir, gcs_options)
    assert status.state == "NEW" and status.lease == 0


@pytest.mark.parametrize("skew", [+300.0, -300.0])
def test_reader_clock_skew_does_not_change_the_verdict(
    gcs_run_dir, emulator, gcs_options, monkeypatch, skew
):
    """A reader whose clock is 5 minutes off judges exactly as a correct one."""
    proc = start_holder(gcs_run_dir, emulator, "--identity", "other-boot")
    real_time = time.time
    try:
        monkeypatch.setattr(time, "time", lambda: real_time() + skew)
        status = cr.inspect(gcs_run_dir, gcs_options)
        assert status.state == "ALIVE", status  # +300 s would make it DEAD
        assert status.heartbeat_age_s < DEAD_AFTER  # the skew is not in the age
    finally:
        proc.kill()
    # -300 s would keep the dead holder ALIVE for 5 more minutes; the bound is
    # far below that and far above a loaded machine's slowest inspect.
    wait_for(
        lambda: cr.inspect(gcs_run_dir, gcs_options).state == "DEAD",
        timeout=abs(skew) / 3,
    )


def test_refused_session_writes_nothing(gcs_run_dir, emulator, storage):
    proc = start_holder(gcs_run_dir, emulator)
    try:
        before = {o.path for o in storage.list()}
        countdown: list[float] = []
        with pytest.raises(RunInUseError, match="takeover=True") as refused:
            RunSession.open(
                storage,
                SessionOptions(heartbeat_seconds=BEAT),
                on_countdown=lambda left, who: countdown.append(left),
            )
        assert "ALIVE" in str(refused.value)
        after = {o.path for o in storage.list()}
        assert after == before
        assert RunListing.read(storage).lease == 1
    finally:
        proc.kill()


def test_session_waits_out_a_silent_holder_then_takes_over(
    gcs_run_dir, emulator, storage
):
    # On another VM (on this one its gone process is proof: no wait at all).
    proc = start_holder(gcs_run_dir, emulator, "--identity", "other-boot")
    proc.kill()
    countdown: list[float] = []
    started = time.monotonic()
    session = RunSession.open(
        storage,
        SessionOptions(heartbeat_seconds=BEAT),
        on_countdown=lambda left, who: countdown.append(left),
    )
    try:
        waited = time.monotonic() - started
        assert session.lease == 2
        assert read_lease(storage, 2).took_over_from == 1
        assert countdown and countdown == sorted(countdown, reverse=True)
        assert waited <= DEAD_AFTER + 1.5
        assert session.events.recent(kind="lease.previous_dead")
    finally:
        session.close()

"""The verdict rules and untrusted records, on fast in-memory run directories."""

from __future__ import annotations

import uuid

import pytest

import colab_resume as cr
from colab_resume.errors import CorruptRecordError
from colab_resume.heartbeat import RunSession, SessionOptions, liveness
from colab_resume.protocol import rundir
from colab_resume.protocol.records import BeatRecord, LeaseRecord, parse, to_json
from colab_resume.storage import Storage


def memory_run() -> str:
    return f"memory://runs/{uuid.uuid4().hex}"


def beat(**overrides) -> BeatRecord:
    fields = dict(
        session_id="s",
        host="h",
        lease=1,
        beat=3,
        state="training",
        step=7,
        progress_at=1.0,
        since_progress_s=0.0,
        written_at=1.0,
    )
    fields.update(overrides)
    return BeatRecord(**fields)


LEASE = LeaseRecord(
    lease=1,
    session_id="s",
    host="h",
    pid=1,
    created_at=0.0,
    package_version="0",
    heartbeat_seconds=30.0,
    dead_after_seconds=120.0,
    stall_after_seconds=600.0,
)


@pytest.mark.parametrize(
    ("done", "the_beat", "age", "expected"),
    [
        (True, beat(), 5.0, "COMPLETED"),
        (True, None, 9999.0, "COMPLETED"),
        (False, None, None, "NEW"),
        (False, None, 10.0, "ALIVE"),
        (False, beat(), 10.0, "ALIVE"),
        (False, beat(), 121.0, "DEAD"),
        (False, beat(state="stopped"), 1.0, "STOPPED"),
        (False, beat(state="stopped"), 9999.0, "STOPPED"),  # silent since, of course
        (False, beat(state="failed", error="OOM"), 1.0, "FAILED"),
        (False, beat(since_progress_s=590.0), 20.0, "STALLED"),
        (False, beat(state="paused", since_progress_s=5000.0), 20.0, "ALIVE"),
        (False, beat(state="starting", since_progress_s=5000.0), 20.0, "ALIVE"),
    ],
)
def test_verdicts(done, the_beat, age, expected):
    state, detail = liveness.judge(
        done=done,
        lease=LEASE,
        beat=the_beat,
        age=age,
        dead_after=120.0,
        stall_after=600.0,
    )
    assert state == expected
    assert detail


def test_record_with_wrong_types_names_the_field():
    data = to_json(beat())
    data["step"] = "seven"
    with pytest.raises(CorruptRecordError, match="'step'.*expected"):
        parse(BeatRecord, data, "heartbeat/00000001.json")
    del data["step"]
    with pytest.raises(CorruptRecordError, match="lacks the field 'step'"):
        parse(BeatRecord, data, "heartbeat/00000001.json")
    with pytest.raises(CorruptRecordError, match="unknown holder state"):
        parse(BeatRecord, to_json(beat(state="dancing")), "hb")


def test_damaged_heartbeat_is_reported_not_a_crash():
    url = memory_run()
    storage = Storage(url)
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=60))
    storage.write_bytes(rundir.heartbeat_path(1), b"{not json")
    status = cr.inspect(url)
    assert status.state == "ALIVE"  # its timestamp still says it beat just now
    assert "not valid JSON" in status.detail
    storage.write_bytes(rundir.heartbeat_path(1), b"[" * 10 + b"]" * 10)
    assert "expected an object" in cr.inspect(url).detail
    storage.write_bytes(rundir.heartbeat_path(1), b" " * (2 << 20))
    assert "larger than" in cr.inspect(url).detail
    session.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"heartbeat_seconds": 0}, "heartbeat_seconds must be a number of seconds > 0"),
        (
            {"heartbeat_seconds": 10, "dead_after_seconds": 5},
            "must be longer than heartbeat_seconds",
        ),
        (
            {"stall_after_seconds": -1},
            "stall_after_seconds must be a number of seconds > 0",
        ),
    ],
)
def test_session_options_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SessionOptions(**kwargs)


def test_default_dead_after_is_four_beats():
    assert SessionOptions(heartbeat_seconds=30).dead_after == 120


def test_local_run_directory_round_trip(tmp_path):
    url = str(tmp_path / "run")
    session = RunSession.open(Storage(url), SessionOptions(heartbeat_seconds=60))
    session.update(state="training", step=3, accelerator="cpu")
    session.writer._beat()
    status = cr.inspect(url)
    assert (status.state, status.step, status.accelerator) == ("ALIVE", 3, "cpu")
    session.close()
    assert cr.inspect(url).holder_state == "stopped"


def test_proof_of_death_is_dead_but_failed_and_completed_still_say_more():
    gone = "holder process 7 on this host is gone"
    judged = dict(lease=LEASE, age=1.0, dead_after=120.0, stall_after=600.0, gone=gone)
    assert liveness.judge(done=False, beat=beat(), **judged) == (
        "DEAD",
        f"{gone}; the run can be taken at once",
    )
    failed = beat(state="failed", error="OOM")
    assert liveness.judge(done=False, beat=failed, **judged)[0] == "FAILED"
    assert liveness.judge(done=True, beat=beat(), **judged)[0] == "COMPLETED"


IDENTITY = {
    "boot_id": "e37e45c1-7c38-4b14-8421-8666929b34de",
    "pid_namespace": 4026531836,
    "start_ticks": 1217988,
}


def test_lease_identity_is_read_and_older_leases_without_it_still_are():
    record = parse(LeaseRecord, {**to_json(LEASE), **IDENTITY}, "lease")
    assert (record.boot_id, record.pid_namespace, record.start_ticks) == tuple(
        IDENTITY.values()
    )
    old = to_json(LEASE)
    for name in IDENTITY:
        del old[name]  # as versions before the identity wrote it
    record = parse(LeaseRecord, old, "lease")
    assert (record.boot_id, record.pid_namespace, record.start_ticks) == (None,) * 3


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("boot_id", "not-a-uuid", "not of the form"),
        ("boot_id", "E37E45C1-7C38-4B14-8421-8666929B34DE\n", "not of the form"),
        ("boot_id", 12345, "expected"),
        ("pid_namespace", 0, "outside"),
        ("pid_namespace", -4, "outside"),
        ("pid_namespace", 4.5, "expected"),
        ("pid_namespace", True, "expected"),
        ("start_ticks", -1, "outside"),
        ("start_ticks", "1217988", "expected"),
        ("pid", 2**40, "outside"),
    ],
)
def test_lease_identity_from_storage_is_untrusted(field, value, message):
    data = {**to_json(LEASE), **IDENTITY, field: value}
    with pytest.raises(CorruptRecordError, match=f"'{field}'.*{message}"):
        parse(LeaseRecord, data, "lease/00000001.json")


def commit_checkpoint(storage: Storage, step: int, lease: int) -> None:
    name = rundir.CheckpointName(step=step, lease=lease)
    storage.write_bytes(f"{name.path}/ckpt.data", b"x")
    storage.write_json(name.manifest_path, {"step": step})


def test_a_commit_after_the_last_beat_is_the_step_reached_not_ahead_of_it():
    """A beat carries the step of its moment; the holder's commit since then
    proves it got further. status shows that step, and the beat's with it."""
    from colab_resume.cli.watch import one_line

    url = memory_run()
    storage = Storage(url)
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=60))
    session.update(state="training", step=2138)
    session.writer._beat()
    commit_checkpoint(storage, 2200, lease=1)
    status = cr.inspect(url)
    assert (status.step, status.checkpoint_step, status.beat_step) == (2200, 2200, 2138)
    line = one_line(status)
    assert "step 2200  ckpt 2200  beat" in line and "ago at step 2138" in line
    # Once a beat carries the step again, it is said once.
    session.update(step=2205)
    session.writer._beat()
    status = cr.inspect(url)
    assert (status.step, status.beat_step) == (2205, 2205)
    assert "at step" not in one_line(status)
    session.close()


def test_an_earlier_sessions_newer_checkpoint_is_not_this_holders_step():
    # The holder restored an older checkpoint (the newest was damaged):
    # that newest one says nothing of where this holder is.
    url = memory_run()
    storage = Storage(url)
    first = RunSession.open(storage, SessionOptions(heartbeat_seconds=60))
    commit_checkpoint(storage, 2200, lease=1)
    first.close()
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=60))
    assert session.lease == 2
    session.update(state="training", step=2010)
    session.writer._beat()
    status = cr.inspect(url)
    assert (status.step, status.checkpoint_step) == (2010, 2200)
    session.close()


class _Judged(Exception):
    """Stops a taking session at its first countdown: the threshold is known."""


def test_a_damaged_lease_is_judged_by_one_threshold_by_readers_and_takers(tmp_path):
    """``status`` judged an unreadable lease dead after 120 s, a session
    waiting to take the run after its own 4 beats (40 s by default): the same
    record, two verdicts. One function (``liveness.thresholds``) decides."""
    storage = Storage(str(tmp_path / "run"))
    RunSession.open(storage, SessionOptions(heartbeat_seconds=5)).close("failed")
    storage.write_bytes(rundir.lease_path(1), b"{not json")  # unreadable, fresh
    storage.delete(rundir.heartbeat_path(1))

    status = cr.inspect(str(tmp_path / "run"))
    assert status.state == liveness.ALIVE  # fresh, judged by the 120 s default
    waits: list[float] = []

    def countdown(left: float, who: str) -> None:
        waits.append(left)
        raise _Judged

    with pytest.raises(_Judged):
        RunSession.open(
            storage, SessionOptions(heartbeat_seconds=0.2), on_countdown=countdown
        )
    dead_after, _ = liveness.thresholds(None)
    assert dead_after == liveness.DEFAULT_DEAD_AFTER_S
    assert waits[0] > dead_after - 30  # not 4 x 0.2 s, the taker's own beats

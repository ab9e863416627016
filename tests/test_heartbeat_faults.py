"""The heartbeat through real HTTP faults: it rides them out and never dies silently."""

from __future__ import annotations

import time

from support.faultproxy import FaultMix

import colab_resume as cr
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.protocol import rundir
from colab_resume.protocol.records import BeatRecord, parse
from colab_resume.storage import Storage

BEAT = 0.5


def beat_number(storage: Storage) -> int:
    data = storage.read_json(rundir.heartbeat_path(1))
    return parse(BeatRecord, data, "heartbeat").beat


def test_beats_continue_through_503s_resets_and_stalls(
    gcs_run_dir, emulator, fault_proxy, gcs_options
):
    through_proxy = Storage(
        gcs_run_dir,
        {"token": "anon", "endpoint_url": fault_proxy.url, "requests_timeout": 1.0},
    )
    direct = Storage(gcs_run_dir, gcs_options)
    # Judged dead after 12 silent beats: a machine loaded by the rest of the
    # suite can stall one beat's requests for seconds, faults or not.
    session = RunSession.open(
        through_proxy, SessionOptions(heartbeat_seconds=BEAT, dead_after_seconds=6.0)
    )
    assert cr.inspect(gcs_run_dir, gcs_options).state == "ALIVE"
    # Heavy, but the kind of weather a heartbeat must ride out: one request
    # in four faulted (a beat makes three requests: fence check, own-lease
    # check, write).
    fault_proxy.set_mix(
        FaultMix(
            error_rate=0.15,
            reset_rate=0.05,
            stall_rate=0.04,
            stall_seconds=0.6,
            statuses=(503, 500, 429),
            seed=7,
        )
    )
    verdicts, beats = [], []
    for step in range(1, 41):  # ~8 s of "training"
        session.update(state="training", step=step)
        verdicts.append(cr.inspect(gcs_run_dir, gcs_options).state)
        beats.append(beat_number(direct))
        time.sleep(0.2)
    fault_proxy.set_mix(FaultMix())
    session.close()
    assert fault_proxy.faults() >= 5, fault_proxy.counts
    assert set(verdicts) == {"ALIVE"}, verdicts  # never judged dead or stalled
    # Beats kept coming to the end; with a quarter of requests faulted fewer
    # than one per interval land, but never too few to stay ALIVE.
    assert beats[-1] >= beats[0] + 5 and beats[-1] > beats[25], beats
    assert not [
        e for e in session.events.recent(kind="heartbeat.failed") if e.level == "error"
    ]
    assert session.writer.fenced_by is None
    assert cr.inspect(gcs_run_dir, gcs_options).holder_state == "stopped"


def test_outage_is_reported_training_goes_on_beats_resume(
    gcs_run_dir, emulator, fault_proxy, gcs_options
):
    storage = Storage(
        gcs_run_dir,
        {"token": "anon", "endpoint_url": fault_proxy.url, "requests_timeout": 1.0},
    )
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=BEAT))
    fault_proxy.start_outage(kind="reset")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and session.writer.failures < 3:
            session.update(state="training", step=1)
            session.check()  # training is not stopped by a failing heartbeat
            time.sleep(0.1)
    finally:
        fault_proxy.end_outage()
    assert session.writer.failures >= 3
    assert not session.writer.healthy
    errors = [
        e for e in session.events.recent(kind="heartbeat.failed") if e.level == "error"
    ]
    assert errors and "Training continues" in errors[0].message
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not session.writer.healthy:
        time.sleep(0.1)
    assert session.writer.healthy
    assert session.events.recent(kind="heartbeat.recovered")
    assert cr.inspect(gcs_run_dir, gcs_options).state == "ALIVE"
    session.close()

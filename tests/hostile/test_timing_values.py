"""A lease that promises absurd timings cannot keep a run ALIVE forever.

``dead_after_seconds`` of NaN, Infinity or 1e300 used to be believed:
``age > dead_after`` is never true, so status and watch said ALIVE forever
and a new session waited forever. Out-of-range timings now make the lease
damaged, and the run is judged with the default thresholds.
"""

from __future__ import annotations

import json
import time

import pytest
from support.hostile import cli

from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.storage import Storage


def dead_holder(storage: Storage, field: str, value: str) -> None:
    """Lease 1 and a 'training' beat as a killed holder left them, one field hostile."""
    lease = {
        "lease": 1,
        "session_id": "hostile",
        "host": "h",
        "pid": 1,
        "created_at": time.time(),
        "package_version": "0",
        "heartbeat_seconds": 0.2,
        "dead_after_seconds": 0.8,
        "stall_after_seconds": 600.0,
    }
    beat = {
        "session_id": "hostile",
        "host": "h",
        "lease": 1,
        "beat": 3,
        "state": "training",
        "step": 5,
        "progress_at": time.time(),
        "since_progress_s": 0.0,
        "written_at": time.time(),
    }
    storage.write_json(
        "run.json", {"run_id": "r", "created_at": time.time(), "package_version": "0"}
    )
    record, path = (
        (beat, "heartbeat/00000001.json")
        if field == "since_progress_s"
        else (lease, "lease/00000001.json")
    )
    record[field] = "PAYLOAD"
    storage.write_bytes(path, json.dumps(record).replace('"PAYLOAD"', value).encode())
    other = lease if record is beat else beat
    other_path = "lease/00000001.json" if other is lease else "heartbeat/00000001.json"
    storage.write_json(other_path, other)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dead_after_seconds", "NaN"),
        ("dead_after_seconds", "Infinity"),
        ("dead_after_seconds", "1e300"),
        ("heartbeat_seconds", "-Infinity"),
        ("stall_after_seconds", "NaN"),
        ("since_progress_s", "1e300"),
    ],
)
def test_absurd_timings_are_damage_judged_with_defaults(
    field, value, gcs_run_dir, gcs_options, emulator
):
    storage = Storage(gcs_run_dir, gcs_options)
    dead_holder(storage, field, value)

    status = cli(emulator, "status", gcs_run_dir, "--json")
    assert status.returncode == 0, status.stderr
    judged = json.loads(status.stdout)
    # A damaged lease's promise is not believed: the default applies.
    assert judged["dead_after_s"] == (0.8 if field == "since_progress_s" else 120.0)
    assert field in judged["detail"] and "outside" in judged["detail"]

    # A new session judges it by the same rule (liveness.thresholds): never
    # the absurd promise; its own dead_after_seconds, when given, as status's
    # override would; else the 120 s default. Not forever.
    give_up = time.monotonic() + 20

    def sleep(seconds: float) -> None:
        assert time.monotonic() < give_up, "still waiting on a hostile lease"
        time.sleep(seconds)

    session = RunSession.open(
        storage,
        SessionOptions(heartbeat_seconds=0.25, dead_after_seconds=1.0),
        sleep=sleep,
    )
    assert session.lease == 2
    session.close()


def test_a_session_never_writes_timings_its_readers_would_refuse():
    with pytest.raises(ValueError, match="at most 86400"):
        SessionOptions(heartbeat_seconds=30_000)
    with pytest.raises(ValueError, match="at most 86400"):
        SessionOptions(dead_after_seconds=2 * 86_400)

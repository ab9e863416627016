"""Records that crash a naive JSON parser are damage, named, never a traceback.

Deep nesting makes ``json`` raise RecursionError, an integer of more than
4,300 digits ValueError, and 10**400 in a float field OverflowError at the
first ``float()``. Before the bounded parser every reader (status, ls,
watch, prune, report) died on them with a traceback, and a new session
could not take the run over.
"""

from __future__ import annotations

import json

import pytest
from support.hostile import cli, crashed, local_cli, stopped_run

from colab_resume.errors import CorruptRecordError
from colab_resume.heartbeat import RunSession, SessionOptions

HUGE_INT = "9" * 5_000
HUGE_FLOAT = "1" + "0" * 400  # 10**400, an integer literal


def hostile(storage, path: str, payload: str) -> None:
    """``path``'s record with its first float field replaced by ``payload``."""
    fields = {
        "lease/00000001.json": "dead_after_seconds",
        "heartbeat/00000001.json": "since_progress_s",
        "run.json": "created_at",
    }
    if payload == "deep":
        storage.write_bytes(path, b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
        return
    if path.startswith("history/"):
        text = f'{{"format": 1, "points": [[1, {payload}, {{}}]], "events": []}}'
    else:
        record = storage.read_json(path)
        record[fields[path]] = "PAYLOAD"
        text = json.dumps(record).replace('"PAYLOAD"', payload)
    storage.write_bytes(path, text.encode())


@pytest.mark.parametrize("payload", ["deep", HUGE_INT, HUGE_FLOAT])
def test_readers_and_takeover_survive_records_that_crash_json(
    payload, gcs_run_dir, gcs_options, emulator, tmp_path
):
    storage = stopped_run(gcs_run_dir, gcs_options)
    objects = ("lease/00000001.json", "heartbeat/00000001.json", "run.json")
    for path in (*objects, "history/00000001-000000.json"):
        hostile(storage, path, payload)

    status = cli(emulator, "status", gcs_run_dir, "--json")
    assert status.returncode == 0 and not crashed(status), status.stderr
    detail = json.loads(status.stdout)["detail"]
    assert "lease/00000001.json" in detail and "heartbeat/00000001.json" in detail
    listing = cli(emulator, "ls", gcs_run_dir)
    assert listing.returncode == 0 and not crashed(listing), listing.stderr
    assert "run.json  UNREADABLE" in listing.stdout
    watch = cli(
        emulator, "watch", gcs_run_dir, "--interval", "0.2", "--dead-after", "0.5"
    )
    assert watch.returncode == 3 and not crashed(watch), watch.stderr  # DEAD
    prune = cli(emulator, "prune", gcs_run_dir, "--keep", "1")
    assert prune.returncode == 0 and not crashed(prune), prune.stderr
    report = cli(emulator, "report", gcs_run_dir, "-o", str(tmp_path / "r.png"))
    assert report.returncode == 0 and not crashed(report), report.stderr
    assert "history/00000001-000000.json" in report.stdout

    # run.json is the run's identity: damaged, it is refused by name...
    options = SessionOptions(heartbeat_seconds=0.2, dead_after_seconds=0.5)
    with pytest.raises(CorruptRecordError, match="run.json"):
        RunSession.open(storage, options)
    # ...while a damaged lease and heartbeat only make the holder dead.
    storage.write_json(
        "run.json", {"run_id": "r", "created_at": 1.7e9, "package_version": "0"}
    )
    session = RunSession.open(storage, options)
    assert session.lease == 2
    session.close()


def test_long_strings_in_leases_and_beats_are_cut_and_marked(tmp_path):
    """A 100,000-character host or error is cut to 4 KiB, not refused.

    Cut, because an error is one exception's message and may be long: a
    holder that failed on it must still read as FAILED, with the start of
    its message.
    """
    url = str(tmp_path / "run")
    storage = stopped_run(url, {})
    lease = storage.read_json("lease/00000001.json")
    lease["host"] = "h" * 100_000
    storage.write_json("lease/00000001.json", lease)
    beat = storage.read_json("heartbeat/00000001.json")
    beat.update(state="failed", error="E" * 100_000, accelerator="a" * 100_000)
    storage.write_json("heartbeat/00000001.json", beat)

    status = local_cli("status", url, "--json")
    assert status.returncode == 0 and not crashed(status), status.stderr
    judged = json.loads(status.stdout)
    assert judged["state"] == "FAILED", judged
    for field in ("host", "accelerator"):
        assert judged[field].endswith("[cut: 95904 more characters]"), field
        assert len(judged[field]) < 4_200
    assert "E" * 4096 + "... [cut: 95904" in judged["detail"]
    assert len(judged["detail"]) < 5_000

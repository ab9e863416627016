"""Security: another run's directory, hostile run data, damaged records.

(Credentials never leaking is checked in ``test_chaos_credentials.py``,
through a real training run with expiring tokens.)
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout

import pytest

from colab_resume.agent.options import AgentOptions
from colab_resume.cli import main
from colab_resume.errors import RunMismatchError
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.protocol import rundir
from colab_resume.storage import Storage

HOSTILE = "$(touch {p}); rm -rf {p}-x; `touch {p}`"


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


# --- "this is my run" -------------------------------------------------------


def test_another_runs_directory_is_refused_and_nothing_written(
    gcs_run_dir, gcs_options
):
    storage = Storage(gcs_run_dir, gcs_options)
    first = RunSession.open(
        storage, SessionOptions(heartbeat_seconds=5, expected_run_id="run-a")
    )
    first.close("stopped")
    assert storage.read_json(rundir.RUN_RECORD)["run_id"] == "run-a"
    before = [(o.path, o.updated) for o in storage.list()]
    with pytest.raises(RunMismatchError, match="belongs to run run-a, not run-b"):
        RunSession.open(
            storage, SessionOptions(heartbeat_seconds=5, expected_run_id="run-b")
        )
    assert [(o.path, o.updated) for o in storage.list()] == before
    # Naming the right run, or none, continues it.
    again = RunSession.open(
        storage, SessionOptions(heartbeat_seconds=5, expected_run_id="run-a")
    )
    assert again.lease == 2
    again.close()


@pytest.mark.parametrize("bad", ["", "../x", "a b", 7, "x" * 200])
def test_agent_run_id_is_checked_up_front(bad):
    with pytest.raises(ValueError, match="run_id"):
        AgentOptions(run_id=bad)


def test_agent_storage_retry_budget_is_checked():
    with pytest.raises(ValueError, match="storage_retry_seconds"):
        AgentOptions(storage_retry_seconds=0)
    assert AgentOptions(storage_retry_seconds=5).storage_retry_seconds == 5


# --- hostile run data never reaches a shell ----------------------------------


def test_on_dead_hook_with_hostile_host_runs_no_shell(
    gcs_run_dir, gcs_options, emulator, tmp_path
):
    storage = Storage(gcs_run_dir, gcs_options)
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=5))
    session.close("failed", error="boom")
    pwned = tmp_path / "pwned"
    host = HOSTILE.format(p=pwned)
    beat = storage.read_json(rundir.heartbeat_path(1))
    beat.update(host=host, error=f"'; touch {pwned}; echo '")
    storage.write_json(rundir.heartbeat_path(1), beat)
    lease = storage.read_json(rundir.lease_path(1))
    lease["host"] = host
    storage.delete(rundir.lease_path(1))
    storage.write_json(rundir.lease_path(1), lease)
    facts = tmp_path / "facts.json"
    dump = (
        "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps("
        "{k: v for k, v in os.environ.items() if k.startswith('COLAB_RESUME_')}))"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "colab_resume",
            "watch",
            gcs_run_dir,
            "--interval",
            "0.2",
            "--on-dead",
            f'{sys.executable} -c "{dump}" {facts}',
            "--endpoint-url",
            emulator.url,
            "--token",
            "anon",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 4, result.stdout + result.stderr  # FAILED
    env = json.loads(facts.read_text())
    assert env["COLAB_RESUME_HOST"] == host  # passed verbatim, as data
    time.sleep(0.2)
    assert not pwned.exists()
    assert not list(tmp_path.glob("pwned*"))


# --- damaged records read back by the CLI ------------------------------------

DAMAGE = {
    "bad_json": b"{not json",
    "huge": b'{"x": "' + b"a" * (2 << 20) + b'"}',
    "wrong_types": json.dumps(
        {"session_id": 5, "lease": "one", "beat": [], "state": {}}
    ).encode(),
    "not_an_object": b"[1, 2, 3]",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("record", ["heartbeat", "lease", "manifest"])
def test_cli_reports_damaged_records_without_crashing(
    record, damage, gcs_run_dir, gcs_options, emulator
):
    storage = Storage(gcs_run_dir, gcs_options)
    # Short beats: with its heartbeat damaged the run is judged by the clock
    # alone, DEAD after 4 beats, which `watch` below waits for.
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=0.5))
    session.close("stopped")
    if record == "heartbeat":
        target = rundir.heartbeat_path(1)
    elif record == "lease":
        target = rundir.lease_path(1)
    else:
        target = "checkpoints/step-000000005.e00000001/MANIFEST.json"
        storage.write_bytes("checkpoints/step-000000005.e00000001/ckpt.index", b"x")
    storage.write_bytes(target, DAMAGE[damage])
    where = ["--endpoint-url", emulator.url, "--token", "anon"]
    for command in (["status", "--json"], ["status"], ["ls"], ["ls", "--json"]):
        rc, out, err = cli(command[0], gcs_run_dir, *command[1:], *where)
        assert "Traceback" not in out + err
        assert rc in (0, 1, 3, 4), (command, rc, out, err)
        if command == ["status", "--json"]:
            json.loads(out)  # still a well-formed answer
    # watch judges the damaged run and ends (STOPPED: the holder's last beat
    # says so; DEAD: that beat is damaged, so the clock alone judges) or,
    # on a damaged lease, keeps reporting; either way without a traceback.
    proc = (
        subprocess.run(
            [sys.executable, "-m", "colab_resume", "watch", gcs_run_dir]
            + ["--interval", "0.2", *where],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if record != "lease"
        else None
    )
    if proc is not None:
        assert "Traceback" not in proc.stdout + proc.stderr
        assert proc.returncode in (0, 3, 4, 5, 6), proc.stdout + proc.stderr


def test_lease_record_with_wrong_types_is_named_in_status(gcs_run_dir, gcs_options):
    storage = Storage(gcs_run_dir, gcs_options)
    RunSession.open(storage, SessionOptions(heartbeat_seconds=5)).close()
    lease = storage.read_json(rundir.lease_path(1))
    lease["pid"] = "not a pid"
    storage.write_bytes(rundir.lease_path(1), json.dumps(lease).encode())
    rc, out, err = cli(
        "status", gcs_run_dir, "--endpoint-url", gcs_options["endpoint_url"]
    )
    assert "Traceback" not in out + err
    assert "lease/00000001.json" in out + err

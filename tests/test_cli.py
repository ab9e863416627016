"""The ``colab-resume`` command line, run as users run it: in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from support import Process, cli, run_cli, wait_for, worker

from colab_resume.cli import main
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.protocol import rundir
from colab_resume.storage import Storage

CLI = [sys.executable, "-m", "colab_resume"]


def holder(run_dir: str, endpoint: str, *args: str) -> Process:
    return worker("holder", run_dir, "--endpoint", endpoint, *args)


def endpoint_args(emulator) -> list[str]:
    return ["--endpoint-url", emulator.url, "--token", "anon"]


def test_status_json_says_dead_after_the_holder_is_killed(gcs_run_dir, emulator):
    # On another VM: DEAD by silence (tests/test_same_host_death.py: at once
    # when the holder's process is provably gone on this host).
    proc = holder(
        gcs_run_dir,
        emulator.url,
        *("--heartbeat", "0.3", "--dead-after", "1.5", "--identity", "other-boot"),
    )
    proc.expect("READY")
    alive = run_cli("status", gcs_run_dir, "--json", *endpoint_args(emulator))
    assert alive.returncode == 0, alive.stderr
    assert json.loads(alive.stdout)["state"] == "ALIVE"
    proc.kill()

    def dead_status() -> dict | None:
        dead = run_cli("status", gcs_run_dir, "--json", *endpoint_args(emulator))
        status = json.loads(dead.stdout)
        return status if status["state"] == "DEAD" else None

    # The verdict follows the heartbeat's age, not this test's clock: DEAD
    # no earlier than dead_after (1.5 s) and, once the beats stopped, no
    # later than dead_after + one beat (0.3 s) + two polls (the last ALIVE
    # one and the one that read DEAD). The
    # wait itself is generous, so a loaded machine's slow CLI starts do not
    # fail it.
    polled: list[float] = []

    def timed_dead_status() -> dict | None:
        started = time.monotonic()
        try:
            return dead_status()
        finally:
            polled.append(time.monotonic() - started)

    status = wait_for(timed_dead_status, 60, "status DEAD", interval=0.1)
    assert 1.5 <= status["heartbeat_age_s"] <= 1.5 + 0.3 + 2 * max(polled) + 0.5, (
        status,
        polled,
    )
    for key in (
        "state",
        "step",
        "checkpoint_step",
        "heartbeat_age_s",
        "lease",
        "session_id",
        "host",
        "accelerator",
    ):
        assert key in status


def test_status_answers_fast_without_tensorflow(gcs_run_dir, emulator, gcs_options):
    session = RunSession.open(
        Storage(gcs_run_dir, gcs_options), SessionOptions(heartbeat_seconds=5)
    )
    code = (
        "import sys, time, json, io, contextlib\n"
        "from colab_resume.cli import main\n"
        "start = time.process_time()\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    rc = main(['status', {gcs_run_dir!r}, '--json', '--endpoint-url', "
        f"{emulator.url!r}, '--token', 'anon'])\n"
        "print(json.dumps({'rc': rc, 'cpu_seconds': time.process_time() - start,\n"
        "  'tf': 'tensorflow' in sys.modules,\n"
        "  'state': json.loads(out.getvalue())['state']}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    session.close()
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["rc"] == 0 and report["state"] == "ALIVE"
    assert report["tf"] is False
    # CPU time, not wall time: a loaded machine stretches the wall clock, but
    # what makes a status slow is work done here (importing TensorFlow alone
    # costs several CPU seconds), and that a CPU-time bound still catches.
    assert report["cpu_seconds"] < 1.0, report


def test_watch_exits_3_on_dead_and_alerts_without_a_shell(
    gcs_run_dir, emulator, tmp_path
):
    proc = holder(
        gcs_run_dir, emulator.url, "--heartbeat", "0.3", "--dead-after", "1.5"
    )
    proc.expect("READY")
    facts = tmp_path / "facts.json"
    pwned = tmp_path / "pwned"
    dump = (
        "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps("
        "{k: v for k, v in os.environ.items() if k.startswith('COLAB_RESUME_')}))"
    )
    # A shell would run the $(...) and create `pwned`; we pass it as a plain argument.
    on_dead = f"{sys.executable} -c \"{dump}\" {facts} '$(touch {pwned})'"
    watcher = cli(
        "watch",
        gcs_run_dir,
        "--interval",
        "0.2",
        "--on-dead",
        on_dead,
        *endpoint_args(emulator),
    )
    watcher.expect("ALIVE", timeout=30)
    time.sleep(1.0)  # a second of a live run: watch must not end in it
    assert watcher.alive  # still watching a live run
    # Killed on this host: DEAD at the next poll (the process is gone).
    proc.kill()
    out = watcher.finish(expect_rc=3, timeout=30).stdout
    assert "ALIVE" in out and "DEAD" in out and "is gone" in out
    env = json.loads(facts.read_text())
    assert env["COLAB_RESUME_STATE"] == "DEAD"
    assert env["COLAB_RESUME_LEASE"] == "1"
    assert env["COLAB_RESUME_RUN_DIR"] == gcs_run_dir
    assert not pwned.exists()


def test_watch_exits_0_on_completed(gcs_run_dir, emulator, gcs_options):
    session = RunSession.open(
        Storage(gcs_run_dir, gcs_options), SessionOptions(heartbeat_seconds=5)
    )
    session.complete()
    result = run_cli(
        "watch", gcs_run_dir, "--interval", "0.2", *endpoint_args(emulator)
    )
    assert result.returncode == 0, result.stderr
    assert "COMPLETED" in result.stdout


def test_ls_shows_leases_and_committed_and_uncommitted_checkpoints(
    gcs_run_dir, gcs_options, emulator
):
    storage = Storage(gcs_run_dir, gcs_options)
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=5))
    session.update(state="training", step=300)
    done = rundir.CheckpointName(step=200, lease=1)
    storage.write_bytes(f"{done.path}/ckpt.data-00000-of-00001", b"x" * 2000)
    storage.write_json(done.manifest_path, {"step": 200})
    partial = rundir.CheckpointName(step=300, lease=1)
    storage.write_bytes(f"{partial.path}/ckpt.data-00000-of-00001", b"x" * 10)
    session.close()
    result = run_cli("ls", gcs_run_dir, *endpoint_args(emulator))
    assert result.returncode == 0, result.stderr
    assert "session " + session.session_id in result.stdout
    assert "step       200  lease    1  committed" in result.stdout
    assert "step       300  lease    1  UNCOMMITTED" in result.stdout
    listing = json.loads(
        run_cli("ls", gcs_run_dir, "--json", *endpoint_args(emulator)).stdout
    )
    assert [c["committed"] for c in listing["checkpoints"]] == [True, False]
    assert listing["leases"][0]["heartbeat"]["state"] == "stopped"


def test_a_cleanly_stopped_run_is_stopped_not_dead(tmp_path, capsys):
    """stop(), SIGTERM and Ctrl-C close the session "stopped": status, ls and
    watch say STOPPED (watch exits 5 and alerts: the run trains no more)."""
    run_dir = str(tmp_path / "run")
    session = RunSession.open(Storage(run_dir), SessionOptions(heartbeat_seconds=5))
    session.update(state="training", step=7)
    session.close("stopped")
    assert main(["status", run_dir]) == 0
    out = capsys.readouterr().out
    assert "STOPPED" in out and "stopped cleanly" in out and "DEAD" not in out
    assert main(["ls", run_dir]) == 0
    assert "state     STOPPED: the holder stopped cleanly" in capsys.readouterr().out
    assert main(["ls", run_dir, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "STOPPED"
    facts = tmp_path / "facts.json"
    dump = (
        "import json, os, sys; open(sys.argv[1], 'w').write("
        "os.environ['COLAB_RESUME_STATE'])"
    )
    on_dead = f'{sys.executable} -c "{dump}" {facts}'
    assert main(["watch", run_dir, "--interval", "0.1", "--on-dead", on_dead]) == 5
    assert "STOPPED" in capsys.readouterr().out
    assert facts.read_text() == "STOPPED"


def test_bad_url_is_a_one_line_error_naming_the_fix(capsys):
    assert main(["status", "foo://bucket/run"]) == 1
    err = capsys.readouterr().err
    assert "Unknown URL scheme 'foo://'" in err and "gs://bucket/path" in err


def test_a_local_run_dir_that_does_not_exist_is_named_not_new(tmp_path, capsys):
    """The CLI and cr.inspect give one answer, in the same words."""
    import colab_resume as cr
    from colab_resume.errors import RunDirNotFoundError

    missing = tmp_path / "runs" / "typo"
    assert main(["status", str(missing)]) == 1
    err = capsys.readouterr().err
    assert f"no run directory at {missing}" in err and "gs://BUCKET" in err
    with pytest.raises(RunDirNotFoundError) as raised:
        cr.inspect(str(missing))
    assert err.strip() == f"colab-resume: {raised.value}"
    assert not missing.exists()  # asking created nothing


def test_missing_bucket_names_the_create_command(emulator, capsys):
    rc = main(
        [
            "status",
            "gs://no-such-bucket-here/run",
            "--endpoint-url",
            emulator.url,
            "--token",
            "anon",
        ]
    )
    assert rc == 1
    assert (
        "gcloud storage buckets create gs://no-such-bucket-here"
        in capsys.readouterr().err
    )


# A bound for a hung demo, not a window it must fit: 25 s idle, several
# minutes on a loaded 2-core machine (it trains twice and waits out a death).
@pytest.mark.timeout(900)
def test_demo_runs(tmp_path):
    result = subprocess.run(
        CLI + ["demo", "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=800,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SIGKILL" in result.stdout
    assert "DEAD," in result.stdout
    assert "COMPLETED: lease 2" in result.stdout
    assert "bitwise equal to the uninterrupted run: True" in result.stdout


def test_prune_keeps_the_newest_and_spares_a_live_holders_upload(
    gcs_run_dir, gcs_options, emulator
):
    storage = Storage(gcs_run_dir, gcs_options)
    first = RunSession.open(storage, SessionOptions(heartbeat_seconds=5))
    first.close()
    for step in (100, 200, 300, 400, 500):
        name = rundir.CheckpointName(step=step, lease=1)
        storage.write_bytes(f"{name.path}/ckpt.data", b"x" * 10)
        storage.write_json(name.manifest_path, {"step": step})
    storage.write_bytes(f"{rundir.CheckpointName(600, 1).path}/ckpt.data", b"x")
    live = RunSession.open(storage, SessionOptions(heartbeat_seconds=5))
    storage.write_bytes(f"{rundir.CheckpointName(700, 2).path}/ckpt.data", b"x")

    args = ["prune", gcs_run_dir, "--keep", "2", *endpoint_args(emulator)]
    dry = run_cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would delete 4 checkpoint directories" in dry.stdout
    assert len(storage.list(rundir.CHECKPOINT_DIR)) == 12  # nothing deleted

    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    left = {o.path.split("/")[1] for o in storage.list(rundir.CHECKPOINT_DIR)}
    assert left == {
        "step-000000400.e00000001",
        "step-000000500.e00000001",
        "step-000000700.e00000002",  # the live holder's upload in flight
    }
    live.close()

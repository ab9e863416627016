"""No secret a user passes reaches the run directory: every record swept.

A run lives through what a real one meets: a first session dies
(SIGKILL); ``colab-resume supervise`` relaunches it with a command that
carries secrets the 8 common ways (environment variables set by ``env``,
command-line options, a webhook URL); the relaunched session fails on an
error whose text holds a GCS HMAC key; a third session, with the same
secrets in its environment, trains to the end; an MLflow run is opened
with a tracking URI that holds a password. Then every object in the run
directory (supervisor/, trackers/, leases, heartbeats, run.json, history,
events, checkpoints, DONE.json) and the supervisor's console are searched
for each secret. Real processes, a real MLflow server, TensorFlow on CPU.
"""

from __future__ import annotations

import os
import shlex
import sys

import pytest
from support.processes import cli, python_path, run_worker

import colab_resume as cr
from colab_resume.heartbeat import liveness
from colab_resume.storage import Storage

pytestmark = pytest.mark.timeout(900)

WORKER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "workers")
AGENT_WORKER = os.path.join(WORKER, "agent_worker.py")

# Shaped like the real thing, valid nowhere.
SECRETS = {
    "WANDB_API_KEY": "0f3c9a7e5b1d2c4e6a8b0d2f4e6a8c0b1d3f5a7c",
    "hf-token": "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",
    "api-key": "sk-proj-Tk8Vn2Lq9Wx4Zr7Yp3Ms6Hd1Jf5Gb0Ce",
    "db-password": "correct-horse-battery-staple-42",
    "GITHUB_TOKEN": "ghp_R7nK2vQ9xL4mZ8wT1yP6sD3fH5jB0cG2aE4u",
    "slack": "https://hooks.slack.com/services/T01ABCDEF/B02GHIJKL/XyZ9aBcDeFgHiJkLmNoPqRsT",
    "KAGGLE_KEY": "5e8d1c4b7a0f3e6d9c2b5a8f1e4d7c0b",
    "MLFLOW_TRACKING_PASSWORD": "mlflow-Pa55-word-7731",
    "mlflow-uri": "uri-Pa55-word-9044",
    "hmac-id": "GOOG1E" + "J7QX2MZP4KLT9WRB" * 3 + "A3VHN7QX2MZ",
    "hmac-secret": "bGx9Q2x+Zk4wR1dzYTdmUk8vcHE3Tm1LdjJhQ2sz",
}
ENVIRONMENT = (
    "WANDB_API_KEY",
    "GITHUB_TOKEN",
    "KAGGLE_KEY",
    "MLFLOW_TRACKING_PASSWORD",
)


def secret_environment() -> dict[str, str]:
    return {name: SECRETS[name] for name in ENVIRONMENT}


def relaunch_command(run_dir: str, out: str) -> str:
    """``env K=V ... python SHIM --hf-token ... --api-key ...``: the shim
    starts the training script and ignores the options, as a user's launcher
    script would pass them on to code that uses them."""
    shim = (
        "import os, sys; "
        f"os.execv(sys.executable, [sys.executable, {AGENT_WORKER!r}, {run_dir!r}, "
        f"{out!r}, '--raise-at-step', '8'])"
    )
    return shlex.join(
        [
            "env",
            *(f"{name}={SECRETS[name]}" for name in ENVIRONMENT),
            f"AGENT_WORKER_ERROR=storage refused key {SECRETS['hmac-id']} "
            f"secret {SECRETS['hmac-secret']}",
            sys.executable,
            "-c",
            shim,
            "--hf-token",
            SECRETS["hf-token"],
            "--api-key",
            SECRETS["api-key"],
            "--db-password",
            SECRETS["db-password"],
            "--notify",
            SECRETS["slack"],
        ]
    )


def every_object(run_dir: str) -> dict[str, bytes]:
    found = {}
    for folder, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, run_dir)] = f.read()
    return found


def test_no_secret_reaches_any_record_of_the_run_directory(tmp_path, mlflow_server):
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out.npz")
    env = {"PYTHONPATH": python_path(), **secret_environment()}
    run_worker(
        "agent_worker", run_dir, out, "--kill-at-step", "3", expect_rc=-9, env=env
    )
    supervisor = cli(
        "supervise", run_dir, "--relaunch", relaunch_command(run_dir, out),
        "--interval", "0.3", "--start-timeout", "180", "--started-after", "1",
        env=env,
    ).finish(4, timeout=400)  # fmt: skip
    assert liveness.read_status(Storage(run_dir)).state == liveness.FAILED
    run_worker("agent_worker", run_dir, out, env=env)
    host = mlflow_server.split("://", 1)[1]
    agent = cr.Agent(run_dir)
    with cr.trackers.mlflow_run(
        agent,
        experiment="sweep",
        tracking_uri=f"http://alice:{SECRETS['mlflow-uri']}@{host}",
    ):
        pass
    objects = every_object(run_dir)
    kinds = {path.split(os.sep)[0] for path in objects}
    for kind in ("supervisor", "trackers", "lease", "heartbeat", "checkpoints"):
        assert kind in kinds, sorted(objects)
    for record in ("run.json", "DONE.json"):
        assert record in objects, sorted(objects)
    said = [p for p in objects if p.startswith("supervisor")]
    assert any(p.endswith(".relaunches.json") for p in said), said
    assert any(p.endswith(".beat.json") for p in said), said
    failed = [p for p, data in objects.items() if b"a bug at step 8" in data]
    assert failed, "the failed session's error is recorded somewhere"
    leaks = [
        f"{name} in {path}"
        for path, data in objects.items()
        for name, secret in SECRETS.items()
        if secret.encode() in data or secret[:16].encode() in data
    ]
    assert not leaks, leaks
    shown = supervisor.stdout + supervisor.stderr
    assert not [name for name, secret in SECRETS.items() if secret in shown], shown

"""A real MLflow tracking server for the tests, started on a free port.

``mlflow server`` with a SQLite store in a temporary folder, module-scoped
(starting it takes seconds): a test names the fixture ``mlflow_server`` and
gets its URL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from support.waiting import wait_for

# What every tracker process here runs with: W&B offline and quiet, no
# telemetry leaving the machine.
QUIET_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    pytest.importorskip("mlflow")
    base = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "mlflow", "server"),
            *("--backend-store-uri", f"sqlite:///{base / 'mlflow.db'}"),
            *("--default-artifact-root", str(base / "artifacts")),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(base / "server.log", "wb"),  # noqa: SIM115 (closed with it)
        env={**os.environ, **QUIET_ENV},
        start_new_session=True,  # its workers in one group, ended together
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: answers(f"{url}/health"),
            120,
            "the MLflow server to answer /health",
            interval=0.2,
            unless=lambda: (
                None
                if server.poll() is None
                else f"it exited: {(base / 'server.log').read_text()[-2000:]}"
            ),
        )
        yield url
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()

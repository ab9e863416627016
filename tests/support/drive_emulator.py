"""Start the Drive API emulator (tests/drive_mock/server.js) on loopback.

google-drive-mock (npm, installed by the Makefile into build/drive-mock)
serves Drive v2/v3 file routes from memory; server.js mounts in front of it
the upload routes it lacks (resumable sessions) or cannot do binary-safely
(multipart and media uploads). Its access tokens are fixed: ``TOKEN``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from support.emulator import _die_with_parent, _free_port, wait_until_serving

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = os.path.join(ROOT, "build", "drive-mock", "node_modules")
SERVER = os.path.join(ROOT, "tests", "drive_mock", "server.js")
TOKEN = "valid-token"


class DriveEmulator:
    """A running Drive API emulator; ``url`` is its endpoint."""

    def __init__(self) -> None:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not installed: the Drive emulator needs it")
        if not os.path.isdir(os.path.join(MODULES, "google-drive-mock")):
            raise RuntimeError(
                f"google-drive-mock is not installed in {MODULES}: run "
                f"`make build/drive-mock/.installed`"
            )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="drive-mock-")
        self.log_path = os.path.join(self._dir.name, "server.log")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [node, SERVER, str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NODE_PATH": MODULES},
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        self._wait_ready(timeout=20.0)

    def _wait_ready(self, timeout: float) -> None:
        try:
            wait_until_serving(
                self.process,
                f"{self.url}/",
                self.log_path,
                "the Drive emulator",
                timeout,
            )
        except RuntimeError:
            self.stop()
            raise

    def options(self, endpoint: str | None = None) -> dict[str, str]:
        """Storage options for a gdrive:// run directory on this emulator."""
        return {"token": TOKEN, "endpoint_url": endpoint or self.url}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()
        self._dir.cleanup()


def emulator_options(run_dir: str, endpoint: str) -> dict[str, str]:
    """Storage options for a run directory on either emulator at ``endpoint``."""
    token = TOKEN if run_dir.startswith("gdrive://") else "anon"
    return {"token": token, "endpoint_url": endpoint}

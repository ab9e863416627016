"""Helpers of the hostile-run-directory tests (``tests/hostile``): a run to
damage, a CLI to read it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from colab_resume.checkpoint import CheckpointManager
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.storage import Storage
from support import waiting


def stopped_run(url: str, options: dict) -> Storage:
    """A run with lease 1, its heartbeat, run.json and a history chunk."""
    storage = Storage(url, options)
    RunSession.open(storage, SessionOptions(heartbeat_seconds=5)).close("stopped")
    storage.write_json(
        "history/00000001-000000.json",
        {
            "format": 1,
            "lease": 1,
            "seq": 0,
            "session_id": "s",
            "written_at": 1.7e9,
            "points": [[1, 1.7e9, {"loss": 1.0}]],
            "events": [],
        },
    )
    return storage


def checkpoint_manager(
    storage: Storage, tmp_path, events=None, **options
) -> CheckpointManager:
    """Lease 1's manager, never fenced, keeping 5 (unless ``options`` say
    otherwise): what restore tests damage."""
    return CheckpointManager(
        storage,
        lease=1,
        fence=lambda: None,
        events=events or EventLog(),
        staging_dir=str(tmp_path / "staging"),
        **{"keep": 5, **options},
    )


def cli(emulator, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m colab_resume ARGS`` against the emulator, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "colab_resume", *args]
        + ["--token", "anon", "--endpoint-url", emulator.url],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"},
    )


def local_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m colab_resume ARGS`` on a local run directory, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "colab_resume", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def crashed(result: subprocess.CompletedProcess) -> bool:
    """Whether a CLI process died on an uncaught exception."""
    return "Traceback" in result.stderr


def wait_for(condition: Callable[[], object], timeout: float = 20.0) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` s."""
    waiting.wait_for(condition, timeout, "the condition")

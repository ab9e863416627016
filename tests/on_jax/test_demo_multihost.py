"""``colab-resume demo --processes 2``, run exactly as the docs say.

Real processes: two JAX processes on the CPU, one SIGKILLed mid-run, the
survivor's exit 75, a restart of both, and bitwise equality at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.timeout(300)


def test_demo_with_two_processes_tells_the_whole_story(tmp_path: str) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND="jax")
    code = "from colab_resume.cli import main; raise SystemExit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "demo", "--processes", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "SIGKILL to process 1 at step" in out
    assert "process 0 exited 75 (RESTART)" in out
    assert "colab-resume status: DEAD" in out
    assert "final weights bitwise equal to the uninterrupted run: True" in out

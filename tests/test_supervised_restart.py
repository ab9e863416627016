"""The recipes' own script under a restarting launcher: SIGTERM → 143 → restart
→ exact resume → 0, bitwise equal to an uninterrupted run.

The launcher is ``support.supervisor`` (a loop standing in for SkyPilot,
Vertex AI or a JobSet, none of which runs here), restarting on the
statuses they are configured to restart on. The script is
``examples/preemptible/train.py``, the command every recipe in
``examples/`` runs; it finds its run directory from
``COLAB_RESUME_RUN_DIR`` as it would under a launcher.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest
from support import assert_bitwise_equal, wait_for
from support.supervisor import supervise

from colab_resume import exit_status
from colab_resume.protocol.listing import RunListing
from colab_resume.storage import Storage

pytestmark = pytest.mark.tf  # the script trains on TensorFlow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "preemptible", "train.py")
EPOCHS, STEPS_PER_EPOCH = 3, 32
TOTAL = EPOCHS * STEPS_PER_EPOCH


def command(out: str, *more: str) -> list[str]:
    return [sys.executable, SCRIPT, "--epochs", str(EPOCHS), "--out", out, *more]


def environment(run_dir: str) -> dict[str, str]:
    return {
        "COLAB_RESUME_RUN_DIR": run_dir,
        "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


def committed_step(run_dir: str) -> int | None:
    if not os.path.isdir(run_dir):
        return None
    return RunListing.read(Storage(run_dir)).committed_step


def test_sigterm_under_a_supervisor_restarts_and_ends_bitwise(tmp_path):
    reference = str(tmp_path / "reference.npz")
    [whole] = supervise(command(reference), env=environment(str(tmp_path / "whole")))
    assert whole.returncode == exit_status.COMPLETED, whole
    assert f"COMPLETED at step {TOTAL}" in whole.stdout

    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out.npz")
    stopped_at: dict[int, int | None] = {}

    def during(attempt: int, proc) -> None:
        if attempt:
            return
        # The first checkpoint committed: training is under way; SIGTERM now.
        wait_for(
            lambda: (committed_step(run_dir) or 0) >= 8,
            240,
            "the first committed checkpoint",
            unless=proc.exited_early,
        )
        proc.popen.send_signal(signal.SIGTERM)

    def after(attempt: int, result) -> None:
        stopped_at[attempt] = committed_step(run_dir)

    results = supervise(
        command(out, "--step-sleep", "0.1"),
        env=environment(run_dir),
        during=during,
        after=after,
    )
    assert [r.returncode for r in results] == [
        exit_status.PREEMPTED,
        exit_status.COMPLETED,
    ], "\n\n".join(map(str, results))
    # The signal landed during training: the first process committed a
    # final checkpoint before the end, and said nothing of completing.
    first = stopped_at[0]
    assert first is not None and 8 <= first < TOTAL, first
    assert "COMPLETED" not in results[0].stdout
    assert "Traceback" not in results[0].stderr
    assert f"COMPLETED at step {TOTAL}" in results[1].stdout
    assert stopped_at[1] == TOTAL
    listing = RunListing.read(Storage(run_dir))
    assert [lease for lease, _ in listing.leases] == [1, 2]  # it really restarted
    assert_bitwise_equal(reference, out, where=f"SIGTERM after step {first}")

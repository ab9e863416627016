"""The lighter path over several ``model.fit`` calls: real processes, real SIGKILLs.

``tests/workers/light_worker.py`` trains in two phases (each its own ``model.fit``
with ``agent.callback()``) toward ``agent.restore(model, epochs=4)``. The
run must read COMPLETED only once the last phase ends, a kill mid-phase-2
must resume bitwise (finishing the interrupted epoch with a shortened
``fit`` whose checkpoints carry the right steps), and a ``fit`` that
raises must leave a FAILED session, not one beating forever.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from support import assert_bitwise_equal, run_cli, run_worker, worker

from colab_resume.protocol import rundir
from colab_resume.storage import Storage

pytest.importorskip("tensorflow", reason="the lighter path trains with TensorFlow")

TOTAL, PHASE_2_START = 48, 24  # 4 epochs x 12 steps; phase 2 from epoch 2
SEED = int(os.environ.get("EXAMPLES_SEED", random.randrange(1 << 30)))


def work(run_dir: str, out: str, *args: str, expect_rc: int = 0) -> str:
    return run_worker("light_worker", run_dir, out, *args, expect_rc=expect_rc).stdout


def cli_status(run_dir: str) -> dict:
    return json.loads(run_cli("status", run_dir, "--json").stdout)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:
    base = tmp_path_factory.mktemp("light-reference")
    out = str(base / "weights.npz")
    assert "DONE restored=0" in work(str(base / "run"), out)
    return out


def test_run_between_phases_is_alive_and_completes_at_the_planned_end(tmp_path):
    run_dir = str(tmp_path / "run")
    proc = worker(
        "light_worker", run_dir, str(tmp_path / "w.npz"), "--between-seconds", "4"
    )
    try:
        while not proc.expect("", timeout=120).startswith("BETWEEN"):
            pass
        status = cli_status(run_dir)
        assert status["state"] == "ALIVE", status
        assert status["checkpoint_step"] == PHASE_2_START  # phase 1's end, saved
        assert not Storage(run_dir).exists(rundir.DONE_RECORD)
        proc.finish(expect_rc=0, timeout=120)
    finally:
        proc.kill()
    status = cli_status(run_dir)
    assert status["state"] == "COMPLETED" and status["checkpoint_step"] == TOTAL


def test_killed_mid_phase_2_resumes_bitwise(reference, tmp_path):
    rng = random.Random(f"{SEED}-lighter")
    # Strictly between two checkpoints of phase 2 (24, 29, 34, ...), after
    # the second, so a phase-2 checkpoint has surely committed.
    step = rng.choice([s for s in range(31, TOTAL) if (s - PHASE_2_START) % 5])
    where = f"(EXAMPLES_SEED={SEED}: killed at step {step})"
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "w.npz")
    killed = work(run_dir, out, "--kill-at-step", str(step), expect_rc=-9)
    assert f"KILLING at step {step}" in killed and "BETWEEN" in killed, where
    assert not Storage(run_dir).exists(rundir.DONE_RECORD), where
    assert cli_status(run_dir)["state"] != "COMPLETED", where

    resumed = work(run_dir, out)
    restored = int(resumed.split("RESTORED ")[1].split()[0])
    assert PHASE_2_START <= restored < step, where
    # The interrupted epoch's tail is a shorter fit: its checkpoints are
    # numbered after the restored step, not from the short epoch's length.
    committed = [
        int(line.split()[1])
        for line in resumed.splitlines()
        if line.startswith("COMMITTED")
    ]
    assert committed and min(committed) > restored and max(committed) == TOTAL, where
    assert_bitwise_equal(reference, out, where=where)
    assert cli_status(run_dir)["state"] == "COMPLETED"


def test_fit_that_raises_leaves_a_failed_session(tmp_path):
    run_dir = str(tmp_path / "run")
    stdout = work(run_dir, str(tmp_path / "w.npz"), "--raise-at-step", "30")
    assert "RAISED user code failed at step 30" in stdout
    # Read while the process (a notebook kernel) still lives.
    assert "STATUS FAILED failed" in stdout
    assert not Storage(run_dir).exists(rundir.DONE_RECORD)

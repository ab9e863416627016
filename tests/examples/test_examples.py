"""Code shaped like the public Keras examples resumes exactly after a real SIGKILL.

For each workload of ``workloads.py``: one uninterrupted run, then a run
SIGKILLed at a random step between two checkpoints and the same command run
again. Everything the user can see must be bitwise that of the uninterrupted
run: every model variable and every optimizer's state (a GAN's two
included), the History of every epoch (the interrupted one too), the
callbacks' files (CSV log, best-weights file), the sequence of callback
calls, and when EarlyStopping stopped. ``EXAMPLES_SEED`` fixes the kill steps.

Reported numbers are held to 2 ulp of float32 (see ``tests/support/compare.py``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest
from support.compare import assert_same_files, assert_same_history
from support.processes import python_path, read_out

WORKER = os.path.join(os.path.dirname(__file__), "worker.py")
SAVE_EVERY = 5
SEED = int(os.environ.get("EXAMPLES_SEED", random.randrange(1 << 30)))


def work(
    workload: str, run_dir: str, out_dir: str, *args: str, expect_rc: int = 0
) -> subprocess.CompletedProcess:
    argv = [sys.executable, WORKER, workload, run_dir, out_dir, *args]
    argv += ["--save-every-steps", str(SAVE_EVERY)]
    env = dict(os.environ, PYTHONPATH=python_path())
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == expect_rc, result.stdout + result.stderr[-4000:]
    return result


def outcome(out_dir: str) -> tuple[dict, dict[str, np.ndarray]]:
    weights, result = read_out(out_dir)
    return result, weights


def kill_step(total: int, rng: random.Random) -> int:
    """A step strictly between two checkpoints, after the second one.

    (Saving the second waits for the first's upload, so a checkpoint is
    surely committed when the kill lands.)
    """
    choices = [s for s in range(2 * SAVE_EVERY + 1, total) if s % SAVE_EVERY]
    return rng.choice(choices)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A workload's uninterrupted run (run directory, outputs), made once."""
    made: dict[str, tuple[str, str]] = {}

    def get(workload: str) -> tuple[str, str]:
        if workload not in made:
            base = tmp_path_factory.mktemp(f"reference-{workload}")
            made[workload] = (str(base / "run"), str(base / "out"))
            work(workload, *made[workload])
        return made[workload]

    return get


@pytest.mark.parametrize("workload", ["convnet", "gan", "vae", "mixed_precision"])
def test_killed_at_a_random_step_resumes_bitwise(workload, reference, tmp_path):
    expected, expected_weights = outcome(reference(workload)[1])
    total = expected["steps_here"]

    rng = random.Random(f"{SEED}-{workload}")
    step = kill_step(total, rng)
    where = f"({workload}, EXAMPLES_SEED={SEED}: killed at step {step} of {total})"
    run_dir, out_dir = str(tmp_path / "run"), str(tmp_path / "out")
    killed = work(workload, run_dir, out_dir, "--kill-at-step", str(step), expect_rc=-9)
    assert f"KILLING at step {step}" in killed.stdout, where
    work(workload, run_dir, out_dir)
    actual, actual_weights = outcome(out_dir)

    # The kill landed during training, after a checkpoint: a real resume.
    assert 0 < actual["restored_step"] < step, where
    assert actual["steps_here"] == total - actual["restored_step"], where
    assert sorted(actual_weights) == sorted(expected_weights)
    assert any(k.startswith("optimizer") for k in expected_weights)
    different = [
        k
        for k in expected_weights
        if not np.array_equal(expected_weights[k], actual_weights[k])
    ]
    assert not different, f"{where} variables differ: {different}"
    assert_same_history(actual["history"], expected["history"], where)
    assert_same_files(actual["files"], expected["files"], where)
    assert actual["calls"] == expected["calls"], where
    assert actual["warnings"] == expected["warnings"] == [], where


def test_an_accelerator_lost_inside_the_session_is_recovered_bitwise(
    reference, tmp_path
):
    """In-session recovery rolls the callbacks back with the model."""
    expected, expected_weights = outcome(reference("convnet")[1])
    step = kill_step(expected["steps_here"], random.Random(f"{SEED}-lost"))
    out_dir = str(tmp_path / "out")
    work("convnet", str(tmp_path / "run"), out_dir, "--unavailable-at-step", str(step))
    actual, actual_weights = outcome(out_dir)
    where = f"(EXAMPLES_SEED={SEED}: accelerator lost at step {step})"
    assert actual["recoveries"] == 1, where
    assert 0 < actual["restored_step"] < step, where  # the rollback happened
    for name, value in expected_weights.items():
        assert np.array_equal(value, actual_weights[name]), f"{where} {name}"
    assert_same_history(actual["history"], expected["history"], where)
    assert_same_files(actual["files"], expected["files"], where)
    for key in ("calls", "warnings"):
        assert actual[key] == expected[key], f"{where} {key}"


def test_a_completed_run_asked_for_more_epochs_continues_exactly(reference, tmp_path):
    """The everyday "train 20 more": as if the longer run had been planned."""
    reference_dir = str(tmp_path / "reference")
    work("vae", str(tmp_path / "reference-run"), reference_dir, "--epochs", "6")
    expected, expected_weights = outcome(reference_dir)

    # A copy of the workload's own completed run (its 4 epochs) is extended.
    completed_run, completed_out = reference("vae")
    first, _ = outcome(completed_out)
    assert first["history"]["epoch"] == [0, 1, 2, 3]
    run_dir, out_dir = str(tmp_path / "run"), str(tmp_path / "out")
    shutil.copytree(completed_run, run_dir)
    shutil.copytree(completed_out, out_dir)
    work("vae", run_dir, out_dir, "--epochs", "6")
    actual, actual_weights = outcome(out_dir)

    assert actual["restored_step"] == 32 and actual["steps_here"] == 16
    assert "run.extended" in actual["events"]
    assert_same_history(actual["history"], expected["history"], "extended")
    for name, value in expected_weights.items():
        assert np.array_equal(value, actual_weights[name]), name

    # Asked for fewer, it says what it has and trains nothing.
    work("vae", run_dir, out_dir, "--epochs", "2")
    fewer, _ = outcome(out_dir)
    assert fewer["steps_here"] == 0
    assert fewer["history"]["epoch"] == list(range(6))

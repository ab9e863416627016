"""A resume proves its data position: TensorFlow, tf.data, both drivers.

Real processes (``tests/workers/agent_worker.py``: a 2-replica
MirroredStrategy on CPU, op determinism, a local run directory), SIGKILLed
at a step drawn at random (seeded) in the second or third of three epochs,
then rerun. ``make_dataset(epoch, skip)`` returns a ``tf.data`` pipeline
(a seeded shuffle, batch) that honours ``skip`` right, ignores it, or
honours it one batch early:

* right: the rerun ends bitwise equal to an uninterrupted run;
* ignored or off by one: the rerun is refused by name before its first
  step (a tf.data pipeline cannot be positioned another way), the
  checkpoint kept; with ``skip`` fixed the run resumes from it and ends
  bitwise equal.

``agent.run`` compares with the proof its checkpoint carries; ``agent.fit``
(its batches never pass through Python, so no proof is saved) probes the
``skip`` itself. Last, NumPy batches under TensorFlow's ``agent.fit``
(``tests/on_jax/backend_worker.py`` run here), with ``skip`` ignored.

Every kill must have landed during training; the step resumed from must be
mid-epoch (where a wrong ``skip`` matters).
"""

from __future__ import annotations

import random

import pytest
from support import assert_bitwise_equal, steps_here, train_agent
from support.on_jax import backend_worker
from support.processes import read_out

EPOCHS, STEPS_PER_EPOCH = 3, 12
TOTAL = EPOCHS * STEPS_PER_EPOCH
LOOPS = ["run", "fit"]


def kill_step(seed: int) -> int:
    """A step in the second or third epoch, after a save, not at an epoch's end."""
    steps = [s for s in range(13, TOTAL) if s % STEPS_PER_EPOCH]
    return random.Random(seed).choice(steps)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):  # type: ignore[no-untyped-def]
    """loop -> the weights of an uninterrupted run through it."""
    found: dict[str, str] = {}

    def of(loop: str) -> str:
        if loop not in found:
            base = tmp_path_factory.mktemp(f"reference-{loop}")
            out = str(base / "weights.npz")
            done = train_agent(str(base / "run"), out, "--loop", loop)
            assert steps_here(done) == TOTAL
            found[loop] = out
        return found[loop]

    return of


def kill(run_dir: str, out: str, loop: str, skip_mode: str, seed: int) -> None:
    step = kill_step(seed)
    died = train_agent(
        run_dir,
        out,
        *("--loop", loop),
        *("--skip-mode", skip_mode, "--kill-at-step", str(step)),
        expect_rc=-9,
    )
    assert f"KILLING at step {step}" in died.stdout  # it died training


def assert_resumed_mid_epoch(result: object) -> None:
    restored = TOTAL - steps_here(result)  # type: ignore[arg-type]
    assert 0 < restored and restored % STEPS_PER_EPOCH, restored


@pytest.mark.parametrize(("loop", "seed"), [("run", 11), ("fit", 14)])
def test_a_skip_honoured_right_resumes_bitwise(reference, tmp_path, loop, seed):
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "w.npz")
    kill(run_dir, out, loop, "right", seed)
    resumed = train_agent(run_dir, out, "--loop", loop)
    assert_resumed_mid_epoch(resumed)
    assert_bitwise_equal(reference(loop), out)


@pytest.mark.parametrize(
    ("loop", "mode", "seed"),
    [
        ("run", "ignored", 12),
        ("run", "off-by-one", 13),
        ("fit", "ignored", 15),
        ("fit", "off-by-one", 16),
    ],
)
def test_a_wrong_skip_is_refused_by_name_and_the_run_stays_resumable(
    reference, tmp_path, loop: str, mode: str, seed: int
):
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "w.npz")
    kill(run_dir, out, loop, mode, seed)
    refused = train_agent(
        run_dir,
        out,
        *("--loop", loop, "--skip-mode", mode, "--print-steps"),
        expect_rc=None,
    )
    assert refused.returncode not in (0, -9), refused.returncode
    assert "PositionError: Resuming at batch " in refused.stderr, refused.stderr[-3000:]
    assert "skip parameter is accepted and not used" in refused.stderr
    assert refused.lines("STEP") == []  # refused before its first step
    fixed = train_agent(run_dir, out, "--loop", loop)
    assert_resumed_mid_epoch(fixed)
    assert_bitwise_equal(reference(loop), out)


def test_numpy_batches_with_an_ignored_skip_are_refused_on_tensorflow(tmp_path):
    numpy_on_tf = ("--backend", "tensorflow", "--numpy-data")
    base = str(tmp_path / "straight")
    straight = backend_worker(base, base + "-out", *numpy_on_tf)
    assert straight.returncode == 0, straight.stderr[-4000:]
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "out")
    step = random.Random(17).choice([9, 10, 11, 12, 13])  # 2 epochs of 7 steps
    ignored = (*numpy_on_tf, "--skip-mode", "ignored")
    died = backend_worker(run_dir, out, *ignored, "--kill-at-step", str(step))
    assert died.returncode == -9 and f"KILLING at step {step}" in died.stdout
    refused = backend_worker(run_dir, out, *ignored)
    assert refused.returncode != 0
    assert "PositionError: Resuming at batch " in refused.stderr, refused.stderr[-3000:]
    fixed = backend_worker(run_dir, out, *numpy_on_tf)
    assert fixed.returncode == 0, fixed.stderr[-4000:]
    got, result = read_out(out)
    assert result["restored_step"] % 7, result
    want = read_out(base + "-out")[0]
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name

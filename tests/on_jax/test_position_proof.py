"""A resume proves its data position: ``make_dataset``s with a ``skip`` parameter.

Real processes (``grain_worker.py``, JAX on CPU, Grain from PyPI, no
TensorFlow), SIGKILLed at a mid-epoch step drawn at random (seeded, named
in the test's id) in the second or third of three epochs, then rerun. The
``make_dataset``s take ``skip`` as the tf.data recipe has it and honour it
right, ignore it, or honour it one batch early:

* right: the rerun ends bitwise equal to an uninterrupted run;
* a Grain ``MapDataset`` or iterator (shuffle, random maps, batch, read
  threads) whose ``skip`` is ignored or off by one: the agent positions the
  pipeline itself (by index, or by drawing), says so, and the rerun still
  ends bitwise equal;
* a generator of NumPy batches whose ``skip`` is wrong: refused by name
  before training, the checkpoint kept; fixed, the run resumes from it and
  ends bitwise equal.

The same for ``agent.run`` (``backend_worker.py --loop run``: a custom step
under ``jax.jit``, a list of NumPy batches per epoch, two epochs).

Every kill must have landed during training, at a step after a mid-epoch
save (the restore is checked to be mid-epoch, where a wrong ``skip``
matters).
"""

from __future__ import annotations

import random
import subprocess

import pytest
from support.on_jax import backend_worker, jax_worker
from support.processes import read_out as read

EPOCHS = "3"
STEPS_PER_EPOCH = 7


def worker(run_dir: str, out: str, *args: str) -> subprocess.CompletedProcess[str]:
    return jax_worker("grain_worker", run_dir, out, "--epochs", EPOCHS, *args)


def kill_step(seed: int) -> int:
    """A step in the second or third epoch, not at an epoch's end."""
    steps = [s for s in range(9, 3 * STEPS_PER_EPOCH) if s % STEPS_PER_EPOCH]
    return random.Random(seed).choice(steps)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """kind -> the variables of an uninterrupted run (its skip is always 0)."""
    found: dict[str, dict] = {}

    def of(kind: str) -> dict:
        if kind not in found:
            base = tmp_path_factory.mktemp(f"straight-{kind}")
            done = worker(str(base / "run"), str(base / "out"), "--kind", kind)
            assert done.returncode == 0, done.stderr[-4000:]
            found[kind] = read(str(base / "out"))[0]
        return found[kind]

    return of


def killed(run: str, out: str, kind: str, skip: str, seed: int) -> None:
    step = kill_step(seed)
    died = worker(run, out, "--kind", kind, "--skip", skip, "--kill-at-step", str(step))
    assert died.returncode == -9, died.stderr[-4000:]
    assert f"KILLING at step {step}" in died.stdout  # it died training


def assert_bitwise(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name


@pytest.mark.parametrize(
    ("kind", "skip", "seed", "said"),
    [
        ("map", "right", 1, None),
        ("map", "ignored", 2, "by index"),
        ("map", "off-by-one", 3, "by index"),
        ("iter", "ignored", 4, "by drawing and dropping"),
        ("iter", "off-by-one", 5, "by drawing and dropping"),
    ],
)
def test_a_grain_resume_is_exact_whatever_skip_does(
    tmp_path, uninterrupted, kind: str, skip: str, seed: int, said: str | None
) -> None:
    run, out = str(tmp_path / "run"), str(tmp_path / "out")
    killed(run, out, kind, skip, seed)
    rerun = worker(run, out, "--kind", kind, "--skip", skip)
    assert rerun.returncode == 0, rerun.stderr[-4000:]

    got, result = read(out)
    [restored] = result["restored"]
    assert restored % STEPS_PER_EPOCH, restored  # mid-epoch: skip > 0
    lines = result["positioned"]
    if said is None:
        assert lines == [], lines
    else:
        epoch, batch = divmod(restored, STEPS_PER_EPOCH)
        [repositioned, positioned] = lines
        assert repositioned.startswith(
            f"make_dataset({epoch}, skip={batch}) did not start at batch {batch}"
        )
        assert "skip parameter is accepted and not used" in repositioned
        assert positioned.startswith(
            f"[step {restored}] Grain pipeline positioned {said}"
        )
    assert_bitwise(got, uninterrupted(kind))


@pytest.mark.parametrize(("skip", "seed"), [("ignored", 6), ("off-by-one", 7)])
def test_a_generator_with_a_wrong_skip_is_refused_and_stays_resumable(
    tmp_path, uninterrupted, skip: str, seed: int
) -> None:
    run, out = str(tmp_path / "run"), str(tmp_path / "out")
    killed(run, out, "numpy", skip, seed)
    refused = worker(run, out, "--kind", "numpy", "--skip", skip)
    assert refused.returncode != 0
    assert "PositionError: Resuming at batch " in refused.stderr, refused.stderr[-4000:]
    assert "skip parameter is accepted and not used" in refused.stderr
    # Fixed, the run resumes from the same checkpoint and ends exact.
    fixed = worker(run, out, "--kind", "numpy", "--skip", "right")
    assert fixed.returncode == 0, fixed.stderr[-4000:]
    got, result = read(out)
    [restored] = result["restored"]
    assert restored % STEPS_PER_EPOCH, restored
    assert_bitwise(got, uninterrupted("numpy"))


@pytest.mark.parametrize(("skip", "seed"), [("right", 8), ("ignored", 9)])
def test_agent_run_proves_its_position(tmp_path, skip: str, seed: int) -> None:
    base = str(tmp_path / "straight")
    straight = backend_worker(base, base + "-out", "--loop", "run")
    assert straight.returncode == 0, straight.stderr[-4000:]
    run, out = str(tmp_path / "run"), str(tmp_path / "out")
    step = random.Random(seed).choice([9, 10, 11, 12, 13])  # epoch 1 of 2
    mode = ("--loop", "run", "--skip-mode", skip)
    died = backend_worker(run, out, *mode, "--kill-at-step", str(step))
    assert died.returncode == -9 and f"KILLING at step {step}" in died.stdout
    rerun = backend_worker(run, out, *mode)
    if skip == "ignored":
        assert rerun.returncode != 0
        assert "PositionError: Resuming at batch " in rerun.stderr, rerun.stderr[-4000:]
        rerun = backend_worker(run, out, "--loop", "run")  # fixed
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    got, result = read(out)
    [restored] = result["restores"]
    assert restored % STEPS_PER_EPOCH, restored
    assert_bitwise(got, read(base + "-out")[0])

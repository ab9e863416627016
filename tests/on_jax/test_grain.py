"""Grain pipelines on JAX: SIGKILLed mid-epoch, rerun, bitwise equal.

Real processes (``grain_worker.py``), Grain from PyPI, no TensorFlow: an
uninterrupted run, and one SIGKILLed right after step 10 (checkpoints every
4 steps, 7 steps per epoch: the rerun resumes one batch into the second
epoch) and run again. Every pipeline has a seeded shuffle and a random map
(before the batch for the ``MapDataset``, after read-ahead threads for the
``IterDataset``, a ``RandomMap`` transform in the ``DataLoader``). The final
model and optimizer variables must be bitwise equal, the kill must have
landed during training, and the rerun must have positioned its pipeline
without drawing a batch: by index (``MapDataset``) or by the iterator state
the checkpoint carried. A pipeline changed between the sessions is refused
with both descriptions.
"""

from __future__ import annotations

import subprocess

import pytest
from support.on_jax import jax_worker
from support.processes import read_out as read

KILL_AT = 10


def worker(run_dir: str, out: str, *args: str) -> subprocess.CompletedProcess[str]:
    return jax_worker("grain_worker", run_dir, out, *args)


@pytest.mark.parametrize(
    ("kind", "how"),
    [
        ("map", "by index"),
        ("iter", "by its iterator's saved state"),
        ("loader", "by its iterator's saved state"),
    ],
)
def test_killed_and_rerun_equals_uninterrupted(tmp_path, kind: str, how: str) -> None:
    straight = worker(str(tmp_path / "a"), str(tmp_path / "a-out"), "--kind", kind)
    assert straight.returncode == 0, straight.stderr[-4000:]
    run, out = str(tmp_path / "b"), str(tmp_path / "b-out")
    killed = worker(run, out, "--kind", kind, "--kill-at-step", str(KILL_AT))
    assert killed.returncode == -9, killed.stderr[-4000:]
    assert f"KILLING at step {KILL_AT}" in killed.stdout  # it died training
    rerun = worker(run, out, "--kind", kind)
    assert rerun.returncode == 0, rerun.stderr[-4000:]

    want, _ = read(str(tmp_path / "a-out"))
    got, result = read(out)
    # Mid-epoch either way: step 4 (epoch 0) if the save at 8 was still
    # uploading when the kill landed, else 8 (one batch into epoch 1).
    restored = result["restored"]
    assert restored in ([4], [8]), restored
    [line] = result["positioned"]
    assert line.startswith(f"[step {restored[0]}] Grain pipeline positioned {how}")
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes(), name


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_a_changed_pipeline_is_refused_by_name(tmp_path, kind: str) -> None:
    run, out = str(tmp_path / "run"), str(tmp_path / "out")
    killed = worker(run, out, "--kind", kind, "--kill-at-step", str(KILL_AT))
    assert f"KILLING at step {KILL_AT}" in killed.stdout
    changed = worker(run, out, "--kind", kind, "--changed")
    assert changed.returncode != 0
    assert "is not the Grain pipeline the checkpoint was trained on" in changed.stderr
    stage = {"map": "MapMapDataset", "iter": "MapIterDataset"}[kind]
    assert f"now:        {stage}(transform=scaled)" in changed.stderr
    assert f"checkpoint: {stage}" not in changed.stderr  # the stage added

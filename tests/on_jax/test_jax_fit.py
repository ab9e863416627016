"""Keras on JAX, 2 CPU devices: SIGKILL mid-training, rerun, bitwise equal.

Real processes (``backend_worker.py``): one uninterrupted run, and one killed
right after step 10 (checkpoints every 4 steps, 7 steps per epoch) and run
again. The final model and optimizer variables must be bitwise equal, the
kill must have landed during training, and no TensorFlow may be imported.
"""

from __future__ import annotations

import json
import os

import pytest
from support.on_jax import backend_worker as worker
from support.processes import read_out as read

KILL_AT = 10


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The uninterrupted run's directory (``run/`` and ``out/`` inside)."""
    base = tmp_path_factory.mktemp("straight")
    done = worker(str(base / "run"), str(base / "out"))
    assert done.returncode == 0, done.stderr[-4000:]
    return str(base)


@pytest.fixture(scope="module")
def uninterrupted(straight_run: str) -> tuple[dict, dict]:
    return read(os.path.join(straight_run, "out"))


def test_killed_and_rerun_is_bitwise_equal(
    uninterrupted: tuple[dict, dict], tmp_path: os.PathLike[str]
) -> None:
    run, out = os.path.join(tmp_path, "run"), os.path.join(tmp_path, "out")
    killed = worker(run, out, "--kill-at-step", str(KILL_AT))
    assert killed.returncode == -9, killed.stderr[-4000:]
    assert f"KILLING at step {KILL_AT}" in killed.stdout
    resumed = worker(run, out)
    assert resumed.returncode == 0, resumed.stderr[-4000:]

    expected, straight = uninterrupted
    arrays, result = read(out)
    assert 0 < int(result["restored_step"]) < KILL_AT  # type: ignore[call-overload]
    assert result["steps_here"] == 14 - int(result["restored_step"])  # type: ignore[call-overload]
    assert result["devices"] == straight["devices"] == 2
    assert result["tensorflow_imported"] is straight["tensorflow_imported"] is False
    # Dropout's seed generator is among what must come back.
    assert any("seed_generator" in path for path in result["variables"])  # type: ignore[union-attr]
    assert sorted(arrays) == sorted(expected)
    assert any(k.startswith("optimizer_") for k in arrays)
    for key in expected:
        assert arrays[key].dtype == expected[key].dtype, key
        assert arrays[key].tobytes() == expected[key].tobytes(), key


def test_checkpoints_are_safetensors_host_arrays(straight_run: str) -> None:
    from colab_resume.checkpoint.formats.portable import read_arrays

    run, out = os.path.join(straight_run, "run"), os.path.join(straight_run, "out")
    final = os.path.join(run, "checkpoints", "step-000000014.e00000001")
    with open(os.path.join(final, "MANIFEST.json")) as handle:
        manifest = json.load(handle)
    assert [f["name"] for f in manifest["files"]] == ["ckpt.safetensors"]
    arrays = read_arrays(os.path.join(final, "ckpt.safetensors"))
    for group, variables in manifest["structure"].items():
        for index, (_, shape, dtype) in enumerate(variables):
            array = arrays[f"{group}/{index:06d}"]
            assert list(array.shape) == shape and str(array.dtype) == dtype
    weights, _ = read(out)
    assert arrays["model/000000"].tobytes() == weights["model_000"].tobytes()


def test_lost_tpu_recovers_in_session_bitwise(
    uninterrupted: tuple[dict, dict], tmp_path: os.PathLike[str]
) -> None:
    """An XLA UNAVAILABLE error from a step hook stands in for a halted TPU."""
    run, out = os.path.join(tmp_path, "run"), os.path.join(tmp_path, "out")
    done = worker(run, out, "--unavailable-at-step", "9")
    assert done.returncode == 0, done.stderr[-4000:]
    arrays, result = read(out)
    assert result["recoveries"] == 1
    assert result["restores"] == [8]  # the checkpoint of step 8, in the same process
    assert result["steps_here"] == 14 + (9 - 8)
    assert result["tensorflow_imported"] is False
    expected, _ = uninterrupted
    assert sorted(arrays) == sorted(expected)
    for key in expected:
        assert arrays[key].tobytes() == expected[key].tobytes(), key


def test_custom_loop_killed_and_rerun_is_bitwise_equal(
    tmp_path: os.PathLike[str],
) -> None:
    """agent.run with a stateless-API step under jax.jit, 2 devices."""
    straight = os.path.join(tmp_path, "straight")
    done = worker(
        os.path.join(straight, "run"), os.path.join(straight, "out"), "--loop", "run"
    )
    assert done.returncode == 0, done.stderr[-4000:]
    expected, _ = read(os.path.join(straight, "out"))

    run, out = os.path.join(tmp_path, "run"), os.path.join(tmp_path, "out")
    killed = worker(run, out, "--loop", "run", "--kill-at-step", str(KILL_AT))
    assert killed.returncode == -9, killed.stderr[-4000:]
    assert f"KILLING at step {KILL_AT}" in killed.stdout
    resumed = worker(run, out, "--loop", "run")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    arrays, result = read(out)
    assert 0 < int(result["restored_step"]) < KILL_AT  # type: ignore[call-overload]
    assert result["steps_here"] == 14 - int(result["restored_step"])  # type: ignore[call-overload]
    assert result["iterations"] == 14 and result["tensorflow_imported"] is False
    assert sorted(arrays) == sorted(expected)
    for key in expected:
        assert arrays[key].tobytes() == expected[key].tobytes(), key


def test_lighter_path_killed_mid_epoch_and_rerun_is_bitwise_equal(
    tmp_path: os.PathLike[str],
) -> None:
    """agent.restore + the worker's own model.fit with agent.callback(), on
    2 devices: saves from inside fit, a resume that finishes the epoch."""
    straight = os.path.join(tmp_path, "straight")
    done = worker(
        os.path.join(straight, "run"), os.path.join(straight, "out"), "--loop", "light"
    )
    assert done.returncode == 0, done.stderr[-4000:]
    expected, _ = read(os.path.join(straight, "out"))

    run, out = os.path.join(tmp_path, "run"), os.path.join(tmp_path, "out")
    killed = worker(run, out, "--loop", "light", "--kill-at-step", str(KILL_AT))
    assert killed.returncode == -9, killed.stderr[-4000:]
    assert f"KILLING at step {KILL_AT}" in killed.stdout
    resumed = worker(run, out, "--loop", "light")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    arrays, result = read(out)
    # Saves every 4 steps, 7 to an epoch: each is mid-epoch (4, 8).
    assert int(result["restored_step"]) in (4, 8)  # type: ignore[call-overload]
    assert result["steps_here"] == 14 - int(result["restored_step"])  # type: ignore[call-overload]
    assert result["iterations"] == 14 and result["tensorflow_imported"] is False
    with open(os.path.join(run, "DONE.json")) as handle:
        assert json.load(handle)["final_step"] == 14
    assert sorted(arrays) == sorted(expected)
    for key in expected:
        assert arrays[key].tobytes() == expected[key].tobytes(), key

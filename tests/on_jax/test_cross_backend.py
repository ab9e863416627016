"""One run directory, two backends, other replica counts and precisions.

Colab's reality: the TPU quota ends and the run continues on a GPU runtime
(TensorFlow), then goes back to the TPU (JAX). Real processes: the JAX side
runs here (no TensorFlow installed), the TensorFlow side in the main
virtualenv. A run killed mid-training on one runtime finishes on the other
from the committed step, with all its state: its weights end close to an
uninterrupted run's (not bitwise: the backends reduce in other orders),
the optimizer has counted every step once, and an event says what changed.
A model without Dropout, whose random masks differ between backends; with
Dropout, the seed generator's state (uint32 on JAX, int64 on TensorFlow)
must carry over and end where an uninterrupted run's does.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from support.on_jax import backend_worker as worker
from support.processes import read_out as read

TOTAL = 14
KILL_AT = 10
TF_PYTHON = os.environ.get("COLAB_RESUME_TF_PYTHON", "")


@pytest.fixture(scope="module")
def tf_python() -> str:
    """The main virtualenv's Python (TensorFlow); `make jax-test` names it."""
    assert os.path.isfile(TF_PYTHON), (
        f"COLAB_RESUME_TF_PYTHON={TF_PYTHON!r} is not a Python with TensorFlow; "
        f"run these tests with `make jax-test`, which sets it."
    )
    return TF_PYTHON


def uninterrupted(
    base: os.PathLike[str], *args: str, python: str | None = None
) -> dict[str, np.ndarray]:
    here = {"python": python} if python else {}
    run, out = os.path.join(base, "run"), os.path.join(base, "out")
    done = worker(run, out, "--no-dropout", *args, **here)
    assert done.returncode == 0, done.stderr[-4000:]
    return read(out)[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """An uninterrupted JAX run, 2 replicas, float32, no Dropout."""
    return uninterrupted(tmp_path_factory.mktemp("reference"))


@pytest.fixture(scope="module")
def tf_reference(
    tmp_path_factory: pytest.TempPathFactory, tf_python: str
) -> dict[str, np.ndarray]:
    """The same on TensorFlow, 1 replica (its own initial weights)."""
    base = tmp_path_factory.mktemp("tf-reference")
    return uninterrupted(
        base, "--backend", "tensorflow", "--replicas", "1", python=tf_python
    )


@pytest.fixture(scope="module")
def dropout_reference(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """The seed state an uninterrupted JAX run with Dropout ends with.

    TensorFlow's run ends with the same values (same seed, one draw a step).
    """
    base = tmp_path_factory.mktemp("dropout-reference")
    run, out = os.path.join(base, "run"), os.path.join(base, "out")
    done = worker(run, out)
    assert done.returncode == 0, done.stderr[-4000:]
    return seed_state(*read(out))


def seed_state(arrays: dict[str, np.ndarray], result: dict[str, object]) -> np.ndarray:
    (position,) = [
        i
        for i, path in enumerate(result["variables"])  # type: ignore[call-overload]
        if path.endswith("seed_generator_state")
    ]
    return arrays[f"model_{position:03d}"]


def continue_elsewhere(
    tmp_path: os.PathLike[str],
    first: tuple[str, ...],
    second: tuple[str, ...],
    first_python: str | None = None,
    second_python: str | None = None,
    dropout: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    run = os.path.join(tmp_path, "run")
    model = () if dropout else ("--no-dropout",)
    here = {"python": first_python} if first_python else {}
    killed = worker(run, os.path.join(tmp_path, "a"), *model, *first, **here)
    assert killed.returncode == -9, killed.stderr[-4000:]
    assert f"KILLING at step {KILL_AT}" in killed.stdout
    there = {"python": second_python} if second_python else {}
    out = os.path.join(tmp_path, "b")
    done = worker(run, out, *model, *second, **there)
    assert done.returncode == 0, done.stderr[-4000:]
    return read(out)


def assert_counted_once(result: dict[str, object], *changes: str) -> None:
    restored = int(result["restored_step"])  # type: ignore[call-overload]
    assert 0 < restored <= KILL_AT
    assert result["steps_here"] == TOTAL - restored
    assert result["iterations"] == TOTAL  # every step counted once, across both
    (event,) = result["runtime_changed"]  # type: ignore[misc]
    for change in changes:
        assert change in event["changes"], (change, event)  # type: ignore[index]
    assert "bitwise equality" in event["message"]  # type: ignore[index]


def assert_continued(
    arrays: dict[str, np.ndarray],
    result: dict[str, object],
    reference: dict[str, np.ndarray],
    *changes: str,
) -> None:
    assert_counted_once(result, *changes)
    assert sorted(arrays) == sorted(reference)
    for key in reference:
        np.testing.assert_allclose(arrays[key], reference[key], rtol=2e-3, atol=2e-5)


def test_jax_two_replicas_finishes_on_tensorflow_with_one(
    reference: dict[str, np.ndarray], tf_python: str, tmp_path: os.PathLike[str]
) -> None:
    arrays, result = continue_elsewhere(
        tmp_path,
        ("--kill-at-step", str(KILL_AT)),
        ("--backend", "tensorflow", "--replicas", "1"),
        second_python=tf_python,
    )
    assert result["tensorflow_imported"] is True
    assert_continued(
        arrays, result, reference, "backend jax -> tensorflow", "replicas 2 -> 1"
    )


def test_one_script_of_numpy_batches_finishes_on_tensorflow(
    reference: dict[str, np.ndarray], tf_python: str, tmp_path: os.PathLike[str]
) -> None:
    """The JAX run's make_dataset (a list of NumPy batches), unchanged, on
    TensorFlow: accepted as Keras' fit accepts it, and the run continues."""
    arrays, result = continue_elsewhere(
        tmp_path,
        ("--kill-at-step", str(KILL_AT)),
        ("--backend", "tensorflow", "--replicas", "1", "--numpy-data"),
        second_python=tf_python,
    )
    assert result["tensorflow_imported"] is True
    assert_continued(
        arrays, result, reference, "backend jax -> tensorflow", "replicas 2 -> 1"
    )


def test_tensorflow_finishes_on_jax(
    tf_reference: dict[str, np.ndarray], tf_python: str, tmp_path: os.PathLike[str]
) -> None:
    arrays, result = continue_elsewhere(
        tmp_path,
        ("--backend", "tensorflow", "--replicas", "1", "--kill-at-step", str(KILL_AT)),
        (),
        first_python=tf_python,
    )
    assert result["tensorflow_imported"] is False
    assert_continued(
        arrays, result, tf_reference, "backend tensorflow -> jax", "replicas 1 -> 2"
    )


def test_dropout_model_finishes_on_tensorflow_with_its_seed_state(
    dropout_reference: np.ndarray, tf_python: str, tmp_path: os.PathLike[str]
) -> None:
    """JAX's uint32 seed state goes into TensorFlow's int64 variable."""
    arrays, result = continue_elsewhere(
        tmp_path,
        ("--kill-at-step", str(KILL_AT)),
        ("--backend", "tensorflow", "--replicas", "1"),
        second_python=tf_python,
        dropout=True,
    )
    assert_counted_once(result, "backend jax -> tensorflow")
    state = seed_state(arrays, result)
    assert state.dtype == np.int64
    assert state.tolist() == dropout_reference.tolist()


def test_dropout_model_finishes_on_jax_with_its_seed_state(
    dropout_reference: np.ndarray, tf_python: str, tmp_path: os.PathLike[str]
) -> None:
    """TensorFlow's int64 seed state goes into JAX's uint32 variable."""
    arrays, result = continue_elsewhere(
        tmp_path,
        ("--backend", "tensorflow", "--replicas", "1", "--kill-at-step", str(KILL_AT)),
        (),
        first_python=tf_python,
        dropout=True,
    )
    assert_counted_once(result, "backend tensorflow -> jax")
    state = seed_state(arrays, result)
    assert state.dtype == np.uint32
    assert state.tolist() == dropout_reference.tolist()


def test_precision_change_keeps_the_optimizer_and_names_the_loss_scale(
    reference: dict[str, np.ndarray], tmp_path: os.PathLike[str]
) -> None:
    """float32 -> mixed_float16: Keras wraps Adam in a LossScaleOptimizer."""
    run = os.path.join(tmp_path, "run")
    killed = worker(
        run, os.path.join(tmp_path, "a"), "--no-dropout", "--kill-at-step", str(KILL_AT)
    )
    assert killed.returncode == -9, killed.stderr[-4000:]
    out = os.path.join(tmp_path, "b")
    done = worker(run, out, "--no-dropout", "--precision", "mixed_float16")
    assert done.returncode == 0, done.stderr[-4000:]
    _, result = read(out)
    (event,) = result["runtime_changed"]  # type: ignore[misc]
    assert "precision float32 -> mixed_float16" in event["changes"]
    assert "loss scale starts afresh" in event["message"]
    restored = int(result["restored_step"])  # type: ignore[call-overload]
    assert result["steps_here"] == TOTAL - restored


def test_another_global_batch_is_refused_by_name(tmp_path: os.PathLike[str]) -> None:
    """Batching per replica changes the global batch with the replica count."""
    run = os.path.join(tmp_path, "run")
    per = ("--per-replica-batch", "4")
    killed = worker(
        run, os.path.join(tmp_path, "a"), *per, "--kill-at-step", str(KILL_AT)
    )
    assert killed.returncode == -9, killed.stderr[-4000:]
    again = worker(run, os.path.join(tmp_path, "b"), *per, "--replicas", "1")
    assert again.returncode == 1
    assert "now yields batches of 4 examples" in again.stderr
    assert "trained on batches of 8" in again.stderr

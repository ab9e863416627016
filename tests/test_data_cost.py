"""A make_dataset that is expensive to rebuild every epoch is named, once.

Real TensorFlow on the CPU, real local run directories. The slow pattern is
the one the quick start used to show: a NumPy array used inside
``Dataset.map`` (``tf.gather(x, i)``), which TensorFlow embeds in the map
function's graph as a constant at every call of ``make_dataset``. The fast
one makes the array a tensor once, outside: it is captured by reference.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="tf.data pipelines")
import keras  # noqa: E402

import colab_resume as cr  # noqa: E402
from colab_resume.data.cost import (  # noqa: E402
    LARGE_CONSTANT_BYTES,
    RebuildWatch,
    embedded_constant_bytes,
)

# Just above the threshold: 4200 x 1024 float32 is 17.2 MB.
X = np.random.RandomState(0).rand(4200, 1024).astype("float32")
Y = X[:, :1].copy()
X_TENSOR, Y_TENSOR = tf.constant(X), tf.constant(Y)
BATCH = 64


def numpy_inside_map(epoch: int, skip: int = 0) -> tf.data.Dataset:
    ds = tf.data.Dataset.range(len(X)).shuffle(len(X), seed=epoch)
    ds = ds.batch(BATCH, drop_remainder=True).skip(skip)
    return ds.map(lambda i: (tf.gather(X, i), tf.gather(Y, i))).prefetch(2)


def tensors_made_once(epoch: int, skip: int = 0) -> tf.data.Dataset:
    ds = tf.data.Dataset.range(len(X)).shuffle(len(X), seed=epoch)
    ds = ds.batch(BATCH, drop_remainder=True).skip(skip)
    return ds.map(lambda i: (tf.gather(X_TENSOR, i), tf.gather(Y_TENSOR, i)))


def test_constants_embedded_by_a_numpy_array_are_counted_through_the_pipeline():
    assert X.nbytes > LARGE_CONSTANT_BYTES
    # The map sits under a prefetch: the walk goes through the inputs.
    assert embedded_constant_bytes(numpy_inside_map(0)) >= X.nbytes + Y.nbytes
    assert embedded_constant_bytes(tensors_made_once(0)) < 1024


def test_the_watch_warns_once_for_the_slow_pattern_and_names_the_fix():
    warnings: list[str] = []
    watch = RebuildWatch(warnings.append)
    assert watch.check(tensors_made_once(0), epoch=0, seconds=0.1) is None
    message = watch.check(numpy_inside_map(0), epoch=0, seconds=0.1)
    assert message is not None and warnings == [message]
    assert "make_dataset(0)" in message and "MB of constants" in message
    assert "tf.constant(x)" in message
    watch.check(numpy_inside_map(1), epoch=1, seconds=0.1)
    assert len(warnings) == 1  # once per run


def test_a_slow_rebuild_is_named_whatever_its_cause():
    warnings: list[str] = []
    RebuildWatch(warnings.append).check(tensors_made_once(0), epoch=3, seconds=9.0)
    (message,) = warnings
    assert "make_dataset(3) took 9.0 s" in message


SMALL_X = X[:512, :256].copy()  # 0.5 MB: the pipeline's cost stays out of the suite
SMALL_X_TENSOR = tf.constant(SMALL_X)


def small_numpy_inside_map(epoch: int, skip: int = 0) -> tf.data.Dataset:
    ds = tf.data.Dataset.range(512).batch(BATCH, drop_remainder=True).skip(skip)
    return ds.map(lambda i: (tf.gather(SMALL_X, i), tf.gather(SMALL_X[:, :1], i)))


def small_tensors_made_once(epoch: int, skip: int = 0) -> tf.data.Dataset:
    ds = tf.data.Dataset.range(512).batch(BATCH, drop_remainder=True).skip(skip)
    x, y = SMALL_X_TENSOR, SMALL_X_TENSOR[:, :1]
    return ds.map(lambda i: (tf.gather(x, i), tf.gather(y, i)))


def build_model() -> keras.Model:
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


@pytest.mark.parametrize(
    ("make_dataset", "warned"),
    [(small_numpy_inside_map, True), (small_tensors_made_once, False)],
)
def test_agent_fit_warns_for_the_slow_pattern_only(
    tmp_path, monkeypatch, make_dataset, warned
):
    # The real detection, on an array small enough for the suite.
    monkeypatch.setattr("colab_resume.data.cost.LARGE_CONSTANT_BYTES", 256 << 10)
    agent = cr.Agent(str(tmp_path / "run"), save_every_steps=None, prefer="cpu")
    with agent:
        agent.fit(build_model, make_dataset, epochs=2, steps_per_epoch=2, verbose=0)
    found = [
        e.message
        for e in agent.events.recent(kind="fit.warning")
        if "make_dataset" in e.message
    ]
    assert len(found) == (1 if warned else 0), found

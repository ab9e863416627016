"""NumPy batches on TensorFlow, as Keras' own fit takes them: a list, a
generator, a keras.utils.PyDataset. Real TensorFlow on the CPU. A run
stopped mid-epoch and resumed ends bitwise equal to an uninterrupted one,
under the same rules as on JAX (the same batches per epoch, skip)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the TensorFlow backend")
import keras  # noqa: E402

import colab_resume as cr  # noqa: E402

STEPS, BATCH, EPOCHS = 4, 8, 3


def arrays(epoch: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + epoch)
    x = rng.normal(size=(STEPS * BATCH, 5)).astype("float32")
    return x, (x.sum(axis=1, keepdims=True) > 0).astype("float32")


class EpochBatches(keras.utils.PyDataset):
    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.x, self.y = arrays(epoch)

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.x[i * BATCH : (i + 1) * BATCH], self.y[i * BATCH : (i + 1) * BATCH]


def as_list(epoch: int, skip: int = 0) -> list:
    x, y = arrays(epoch)
    pairs = [
        (x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH])
        for i in range(STEPS)
    ]
    return pairs[skip:]


def as_generator(epoch: int):  # no skip: the agent draws and drops
    yield from as_list(epoch)


def as_py_dataset(epoch: int) -> EpochBatches:
    return EpochBatches(epoch)


def build_model() -> keras.Model:
    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(1, activation="sigmoid")]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


def train(run_dir: str, make_dataset, stop_at: int | None = None) -> list[np.ndarray]:
    agent = cr.Agent(run_dir, prefer="cpu", save_every_steps=2)
    if stop_at is not None:
        agent.on_step(lambda step: agent.stop() if step == stop_at else None)
    agent.fit(
        build_model, make_dataset, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0
    )
    return [np.asarray(v.numpy()) for v in agent.model.weights]


@pytest.mark.parametrize(
    "make_dataset",
    [as_list, as_generator, as_py_dataset],
    ids=["list", "generator", "PyDataset"],
)
def test_numpy_batches_train_and_resume_bitwise_on_tensorflow(
    make_dataset, tmp_path
) -> None:
    reference = train(str(tmp_path / "whole"), make_dataset)
    run = str(tmp_path / "stopped")
    train(run, make_dataset, stop_at=6)  # mid-epoch 2
    stopped = cr.inspect(run).checkpoint_step
    assert stopped is not None and 6 <= stopped < EPOCHS * STEPS  # mid-run
    resumed = train(run, make_dataset)
    for a, b in zip(reference, resumed, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_what_is_not_batches_is_refused_naming_both_kinds(tmp_path) -> None:
    from colab_resume.data.contract import DatasetError

    agent = cr.Agent(str(tmp_path / "run"), prefer="cpu")
    with pytest.raises(DatasetError, match="not iterable"):
        agent.fit(build_model, lambda epoch: 42, epochs=1, steps_per_epoch=2, verbose=0)

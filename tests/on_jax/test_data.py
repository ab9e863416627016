"""NumPy epoch data on JAX: positioned by skipping, fingerprinted, checked."""

from __future__ import annotations

import types

import keras
import numpy as np
import pytest

from colab_resume.agent.epochs import epoch_dataset
from colab_resume.agent.fingerprints import fingerprint
from colab_resume.backend.jax import check_numpy_batch
from colab_resume.data import DatasetError


def batches(epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    x = np.arange(40, dtype="float32").reshape(10, 4) + 100 * epoch
    return [(x[i : i + 2], x[i : i + 2, :1]) for i in range(0, 10, 2)]


class Batches(keras.utils.PyDataset):  # type: ignore[misc]
    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.items = batches(epoch)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self.items[index]


@pytest.mark.parametrize(
    "make_dataset",
    [
        lambda epoch: batches(epoch),  # a list; the agent skips
        lambda epoch: iter(batches(epoch)),  # a one-shot iterator
        lambda epoch, skip=0: batches(epoch)[skip:],  # skips itself
        lambda epoch: Batches(epoch),  # a PyDataset
    ],
    ids=["list", "iterator", "skip-keyword", "pydataset"],
)
def test_positioned_after_skip_and_cut_at_the_epoch(make_dataset: object) -> None:
    got = epoch_dataset(make_dataset, 1, skip=2, steps_per_epoch=4)  # type: ignore[arg-type]
    assert isinstance(got, types.GeneratorType)  # what Keras' fit takes
    got = list(got)
    assert len(got) == 2
    for (x, _), (want, _) in zip(got, batches(1)[2:4], strict=True):
        assert x.tobytes() == want.tobytes()


def test_too_short_and_tf_data_are_refused() -> None:
    with pytest.raises(DatasetError, match="yields 5 batches but steps_per_epoch"):
        epoch_dataset(batches, 0, skip=0, steps_per_epoch=6)
    with pytest.raises(DatasetError, match="not iterable"):
        epoch_dataset(lambda epoch: 3, 0, skip=0, steps_per_epoch=1)


def test_fingerprint_tells_epochs_apart_and_batches_must_split() -> None:
    first = fingerprint(epoch_dataset(batches, 0, skip=0, steps_per_epoch=1))
    again = fingerprint(epoch_dataset(batches, 0, skip=0, steps_per_epoch=1))
    other = fingerprint(epoch_dataset(batches, 1, skip=0, steps_per_epoch=1))
    assert first == again != other
    check_numpy_batch(batches(0)[0], 2, 0)
    with pytest.raises(DatasetError, match="cannot be split evenly over 4 devices"):
        check_numpy_batch(batches(0)[0], 4, 0)

"""Epoch datasets positioned at a step (docs/DESIGN.md §2: no iterator checkpoints).

A distributed iterator cannot be saved, so the data position is restored by
rebuilding the epoch's dataset with ``make_dataset(epoch)`` and skipping the
batches already consumed. ``Dataset.skip`` still *computes* every skipped
element, expensive ``map`` calls included, so a pipeline should be
**index-first**: skip over cheap indices (or file names) and do the
expensive work (decode, augment) after the skip. A ``make_dataset`` that
takes a ``skip`` keyword gets the number of batches to skip and places the
skip itself::

    def make_dataset(epoch, skip=0):
        ds = tf.data.Dataset.range(num_examples)
        ds = ds.shuffle(num_examples, seed=epoch,   # deterministic per epoch
                        reshuffle_each_iteration=False)
        ds = ds.batch(global_batch, drop_remainder=True)
        ds = ds.skip(skip)                          # cheap: indices only
        return ds.map(load_and_augment_batch)       # runs only for batches kept

A plain ``make_dataset(epoch)`` works too; the agent then skips at the end
of the pipeline. ``bench/bench_data_skip.py`` measures the difference.

The fingerprints that catch a ``make_dataset`` that is not deterministic
live in :mod:`colab_resume.agent.fingerprints`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from colab_resume import backend
from colab_resume.data.grain import GrainPosition


def split_step(global_step: int, steps_per_epoch: int) -> tuple[int, int]:
    """(epoch, batches already consumed in that epoch) for a global step."""
    if steps_per_epoch <= 0:
        raise ValueError(f"steps_per_epoch must be > 0, got {steps_per_epoch!r}")
    return divmod(global_step, steps_per_epoch)


def epoch_dataset(
    make_dataset: Callable[..., Any],
    epoch: int,
    *,
    skip: int,
    steps_per_epoch: int,
    position: GrainPosition | None = None,
) -> Any:
    """``make_dataset(epoch)`` positioned after ``skip`` batches, ending at the epoch.

    ``position``: where the run's Grain pipeline stands, for a Grain dataset
    (:mod:`colab_resume.data.grain`).

    Raises:
        DatasetError: it is not a ``tf.data.Dataset``, or it is too short.
    """
    return backend.current().epoch_dataset(
        make_dataset,
        epoch,
        skip=skip,
        steps_per_epoch=steps_per_epoch,
        position=position,
    )


def check_global_batch(dataset: Any, replicas: int, epoch: int) -> None:
    """Refuse ``tf.data`` batches that cannot be split evenly over ``replicas``.

    Raises:
        DatasetError: a batch's size is not a multiple of ``replicas``.
    """
    from colab_resume.backend import tensorflow

    tensorflow.check_global_batch(dataset, replicas, epoch)

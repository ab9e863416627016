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
        ds = ds.shuffle(num_examples, seed=epoch)   # deterministic per epoch
        ds = ds.batch(global_batch, drop_remainder=True)
        ds = ds.skip(skip)                          # cheap: indices only
        return ds.map(load_and_augment_batch)       # runs only for batches kept

A plain ``make_dataset(epoch)`` works too; the agent then skips at the end
of the pipeline. ``bench/bench_data_skip.py`` measures the difference.

To catch a ``make_dataset`` that is not deterministic (an unseeded
shuffle), the fingerprint of each epoch's first batch is stored with the
checkpoint and compared on resume. After the pipeline is fixed, the stored
fingerprints still describe the old one: ``reset_data_fingerprints=True``
(an Agent option) discards them once, through :func:`restored_fingerprints`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

from colab_resume.errors import ColabResumeError
from colab_resume.events import EventLog


class DatasetError(ColabResumeError, ValueError):
    """``make_dataset`` returned something unusable."""


class NonDeterministicDatasetError(DatasetError):
    """``make_dataset(epoch)`` gave different batches before and after a restart."""


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
) -> Any:
    """``make_dataset(epoch)`` positioned after ``skip`` batches, ending at the epoch.

    Raises:
        DatasetError: it is not a ``tf.data.Dataset``, or it is too short.
    """
    import tensorflow as tf

    places_skip = accepts_skip(make_dataset)
    dataset = make_dataset(epoch, skip=skip) if places_skip else make_dataset(epoch)
    if not isinstance(dataset, tf.data.Dataset):
        raise DatasetError(
            f"make_dataset({epoch}) returned {type(dataset).__name__}; it must "
            f"return a tf.data.Dataset of global batches, e.g. "
            f"tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size)."
        )
    if not places_skip:
        dataset = dataset.skip(skip)
    cardinality = int(dataset.cardinality())
    if cardinality >= 0 and cardinality < steps_per_epoch - skip:
        raise DatasetError(
            f"make_dataset({epoch}) yields {cardinality + skip} batches but "
            f"steps_per_epoch is {steps_per_epoch}. Lower steps_per_epoch, or "
            f".repeat() the dataset inside make_dataset."
        )
    return dataset.take(steps_per_epoch - skip)


def accepts_skip(make_dataset: Callable[..., Any]) -> bool:
    """True when ``make_dataset`` takes a ``skip`` keyword (it skips index-first)."""
    try:
        parameters = inspect.signature(make_dataset).parameters
    except (TypeError, ValueError):
        return False
    return "skip" in parameters


def fingerprint(dataset: Any) -> str:
    """A short hash of the dataset's first batch (all its tensors, in order)."""
    import tensorflow as tf

    digest = hashlib.sha256()
    for batch in dataset.take(1):
        for tensor in tf.nest.flatten(batch):
            value = tensor.numpy()
            digest.update(str(value.dtype).encode())
            digest.update(str(value.shape).encode())
            digest.update(value.tobytes())
    return digest.hexdigest()[:16]


def check_fingerprint(epoch: int, recorded: str | None, current: str) -> None:
    """Raise if the epoch's first batch differs from the one seen before the restart."""
    if recorded is not None and recorded != current:
        raise NonDeterministicDatasetError(
            f"make_dataset({epoch}) produced a different first batch than before "
            f"the restart (fingerprint {current} != {recorded}), so resuming "
            f"would train on different data than an uninterrupted run. Make it "
            f"deterministic per epoch: build the dataset inside "
            f"make_dataset(epoch) and shuffle with a seed derived from the "
            f"epoch (ds.shuffle(n, seed=epoch), or "
            f"image_dataset_from_directory(..., seed=epoch)); a dataset built "
            f"once and returned for every epoch reshuffles on each iteration, "
            f"unless shuffled with reshuffle_each_iteration=False. Avoid "
            f"unseeded random augmentation and keep options.deterministic=True. "
            f"Once fixed, the checkpoint still holds the old pipeline's "
            f"fingerprints: run once with cr.Agent(..., "
            f"reset_data_fingerprints=True) to record new ones."
        )


def restored_fingerprints(
    saved: Any,
    *,
    reset: bool,
    events: EventLog | None = None,
    step: int | None = None,
) -> dict[str, str]:
    """The fingerprints a restored checkpoint carried, or none when ``reset``.

    Every driver takes its fingerprints through here on restore. With
    ``reset`` (the ``reset_data_fingerprints`` option) the stored ones are
    dropped, so the resumed epoch is not checked and its fingerprint is
    recorded anew from the current ``make_dataset``; an event says so.

    Args:
        saved: the checkpoint's ``extras["fingerprints"]`` (epoch -> hash).
        reset: discard them.
        events: where the reset is announced.
        step: the restored step, for the event.

    Returns:
        epoch (as a string) -> fingerprint, to check and extend.
    """
    fingerprints = dict(saved) if isinstance(saved, dict) else {}
    if not reset or not fingerprints:
        return fingerprints
    if events is not None:
        epochs = ", ".join(sorted(fingerprints, key=int))
        events.emit(
            "data.fingerprints_reset",
            f"reset_data_fingerprints=True: discarded the data fingerprints of "
            f"epochs {epochs} stored with the checkpoint; this session records "
            f"new ones from the current make_dataset and does not check the "
            f"resumed epoch against the data trained before. Remove the option "
            f"once the run has resumed: while it is set, every resume skips "
            f"this check.",
            level="warning",
            step=step,
        )
    return {}

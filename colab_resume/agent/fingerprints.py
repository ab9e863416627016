"""First-batch fingerprints: the same data after a restart as before it.

To catch a ``make_dataset`` that is not deterministic (an unseeded
shuffle), the fingerprint of each epoch's first batch is stored with the
checkpoint and compared on resume. After the pipeline is fixed, the stored
fingerprints still describe the old one: ``reset_data_fingerprints=True``
(an Agent option) discards them once, through :func:`restored_fingerprints`.

The epochs fingerprinted are built and positioned by
:mod:`colab_resume.agent.epochs`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

from colab_resume import backend
from colab_resume.agent.epochs import epoch_dataset
from colab_resume.data.contract import DatasetError, NonDeterministicDatasetError
from colab_resume.events import EventLog


def batch_hash(batch: Any) -> str:
    """A short hash of one batch: every tensor's dtype, shape and bytes, in order."""
    import keras
    import numpy as np

    digest = hashlib.sha256()
    for tensor in keras.tree.flatten(batch) if batch is not None else []:
        value = np.asarray(tensor)
        digest.update(str(value.dtype).encode())
        digest.update(str(value.shape).encode())
        if value.dtype == object:
            # Strings (raw text for a model's own preprocessing, as keras-hub's
            # tasks take it): an object array's bytes are its pointers.
            for item in value.reshape(-1):
                data = item if isinstance(item, bytes) else str(item).encode()
                digest.update(len(data).to_bytes(8, "little") + data)
        else:
            # The array's own memory where it is contiguous: the same bytes
            # as tobytes(), without copying a batch of images on every save.
            digest.update(np.ascontiguousarray(value).data)
    return digest.hexdigest()[:16]


def fingerprint(dataset: Any) -> str:
    """A short hash of the dataset's first batch (all its tensors, in order)."""
    return first_batch_facts(dataset)[0]


def first_batch_facts(dataset: Any) -> tuple[str, int | None]:
    """The first batch's fingerprint and size (its leading dimension)."""
    batch = backend.current().first_batch_of(dataset)
    return batch_hash(batch), _batch_size(batch)


def _batch_size(batch: Any) -> int | None:
    import keras

    arrays = keras.tree.flatten(batch) if batch is not None else []
    shape: Any = getattr(arrays[0], "shape", ()) if arrays else ()
    return int(shape[0]) if len(shape) else None


def check_global_batch_unchanged(
    epoch: int, recorded: int | None, current: int | None
) -> None:
    """Raise if the global batch differs from the one trained before the restart.

    A ``make_dataset`` that batches per replica (``64 * replicas``) changes
    its global batch with the replica count. The step count would then
    point into other data, and the fingerprint check would call the data
    non-deterministic; this says what really changed.

    Raises:
        DatasetError: it differs.
    """
    if recorded is None or current is None or recorded == current:
        return
    raise DatasetError(
        f"make_dataset({epoch}) now yields batches of {current} examples; the "
        f"checkpoint was trained on batches of {recorded}. The run resumes by "
        f"step, so another global batch would train on other data than the "
        f"steps already done. Keep the global batch fixed when the replica "
        f"count changes (batch by {recorded}, not by a per-replica size times "
        f"the replica count; Keras splits each global batch over the replicas), "
        f"or start a new run_dir."
    )


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


class DataFingerprints:
    """The first-batch fingerprints of recent epochs, carried by checkpoints.

    One component for every driver: record each epoch's fingerprint as it
    starts, check the resumed epoch (or, resumed exactly at an epoch
    boundary, the last epoch before it) against what was recorded before
    the restart, keep the record small.

    Args:
        make_dataset: the user's ``make_dataset(epoch, skip=0)``.
        reset: the ``reset_data_fingerprints`` option: drop the recorded
            fingerprints at every restore of this call.
        events: where a reset is announced (once).
    """

    # Epochs. Only the last few before the one training matter for a resume,
    # but a span of epochs (agent/spans.py, up to 8) is recorded as it starts.
    KEEP = 12

    def __init__(
        self,
        make_dataset: Callable[..., Any],
        *,
        reset: bool = False,
        events: EventLog | None = None,
    ) -> None:
        self.make_dataset = make_dataset
        self.reset = reset
        self._events = events
        self.seen: dict[str, str] = {}
        self.global_batch: int | None = None  # of the epochs recorded here
        self.restored_batch: int | None = None  # of the checkpoint restored

    def restored(self, extras: dict[str, Any], step: int) -> None:
        """Take the fingerprints (and global batch) a restored checkpoint carried."""
        # A recovery may restore the same old checkpoint again, so the reset
        # holds for every restore; it is announced once.
        events, self._events = self._events, None
        self.seen = restored_fingerprints(
            extras.get("fingerprints"), reset=self.reset, events=events, step=step
        )
        saved = extras.get("global_batch")
        self.restored_batch = saved if isinstance(saved, int) else None
        self.global_batch = self.restored_batch

    def extras(self) -> dict[str, Any]:
        """What a checkpoint carries for :meth:`restored`."""
        return {"fingerprints": self.seen, "global_batch": self.global_batch}

    def check(self, start_epoch: int) -> None:
        """Raise if the data differs from what was trained before the restart.

        Raises:
            DatasetError: the global batch changed (e.g. with the replica count).
            NonDeterministicDatasetError: the data did.
        """
        earlier = [int(e) for e in self.seen if int(e) <= start_epoch]
        if earlier:
            epoch = max(earlier)
            current, size = self._of(epoch)
            check_global_batch_unchanged(epoch, self.restored_batch, size)
            check_fingerprint(epoch, self.seen[str(epoch)], current)

    def forget(self) -> None:
        """Drop the fingerprints restored: the data is checked by other
        means, and the epochs' fingerprints are recorded anew from here."""
        self.seen = {}

    def record(self, epoch: int) -> float:
        """Remember ``epoch``'s fingerprint (once), forgetting old epochs.

        Returns:
            The seconds it took (building the epoch's dataset and reading
            its first batch), 0 when it was already recorded.
        """
        if str(epoch) in self.seen:
            return 0.0
        began = time.monotonic()
        self.seen[str(epoch)], size = self._of(epoch)
        self.global_batch = size if size is not None else self.global_batch
        for old in sorted(self.seen, key=int)[: -self.KEEP]:
            del self.seen[old]
        return time.monotonic() - began

    def _of(self, epoch: int) -> tuple[str, int | None]:
        return first_batch_facts(
            epoch_dataset(self.make_dataset, epoch, skip=0, steps_per_epoch=1)
        )

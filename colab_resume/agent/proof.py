"""A resume proves its position: the batch it trains first is the one the run
trained there.

Every checkpoint taken mid-epoch carries the fingerprint of the batch the
run trains next, from the batches handed to the model
(:mod:`colab_resume.agent.trail`). Before training, a resume builds the
epoch positioned as it will train it (by the user's ``skip``, by index, by
Grain's saved state or by drawing), draws its first batch and compares:

* equal: it trains;
* different, and the pipeline is Grain's: ``make_dataset``'s ``skip`` is
  set aside and the agent positions the pipeline itself (by index or
  state, else by drawing and dropping), compares again and, equal, says so
  and trains;
* different otherwise: :class:`~colab_resume.data.contract.PositionError`,
  naming the batch and the likely cause, before any step. The checkpoint
  is untouched: fixed, the run resumes from it.

Where a checkpoint carries no proof (TensorFlow's ``agent.fit``, whose
batches never pass through Python), a ``make_dataset`` that takes ``skip``
is probed where that is cheap: ``make_dataset(epoch, skip=1)``'s first
batch must be batch 1 of ``make_dataset(epoch, skip=0)``, drawn. That
catches a ``skip`` ignored or off by one, not one wrong only further in.

The cost: one batch hashed per save, and at a resume one more build of the
epoch positioned as it trains (``bench/bench_position_proof.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from colab_resume import backend
from colab_resume.agent.epochs import epoch_dataset
from colab_resume.agent.fingerprints import batch_hash
from colab_resume.agent.trail import KEY
from colab_resume.data.contract import PositionError, accepts_skip
from colab_resume.data.grain import GrainPosition, is_grain
from colab_resume.events import EventLog

log = logging.getLogger(__name__)
MakeDataset = Callable[..., Any]


class PositionProof:
    """The position proof a restored checkpoint carried, checked on resume.

    Args:
        events: where a pipeline positioned another way is announced.
        reset: the ``reset_data_fingerprints`` option: the data changed on
            purpose, so the proofs saved before are dropped (a ``skip`` is
            still probed).
    """

    def __init__(self, events: EventLog | None = None, *, reset: bool = False) -> None:
        self._events = events
        self._reset = reset
        self._saved: dict[str, Any] = {}
        self._extras: dict[str, Any] = {}

    def restored(self, extras: dict[str, Any]) -> None:
        """Take the proof (and the Grain state) a restored checkpoint carried."""
        saved = extras.get(KEY)
        self._saved = saved if isinstance(saved, dict) and not self._reset else {}
        self._extras = dict(extras)

    def check(
        self, make_dataset: MakeDataset, epoch: int, skip: int, steps_per_epoch: int
    ) -> MakeDataset:
        """Prove the resume at batch ``skip`` of ``epoch``; see the module.

        Returns:
            The ``make_dataset`` to build the resumed epoch with: the user's,
            or, where its ``skip`` was set aside, one without ``skip``.

        Raises:
            PositionError: the first batch differs, and no other positioning
                gives the batch trained there.
        """
        saved, takes_skip = self._saved, accepts_skip(make_dataset)
        proven = (saved.get("epoch"), saved.get("batch")) == (epoch, skip)
        if not skip or not (proven or takes_skip):
            return make_dataset
        unskipped = _unskipped(make_dataset)
        if proven:
            at, wanted = skip, str(saved.get("fingerprint"))
        else:
            # No proof saved (batches that never passed through Python):
            # the skip itself is probed where it is cheap, at batch 1.
            at = 1
            wanted = self._first(unskipped, epoch, at, steps_per_epoch)
        got = self._first(make_dataset, epoch, at, steps_per_epoch)
        if got == wanted:
            return make_dataset
        if takes_skip and is_grain(make_dataset(epoch, skip=0)):
            # Positioned by the agent instead; where a proof was saved, proven.
            again = wanted
            if proven:
                again = self._first(unskipped, epoch, skip, steps_per_epoch)
            if again == wanted:
                said = _repositioned(epoch, at, got, wanted, proven)
                self._say(said, epoch * steps_per_epoch + skip)
                return unskipped
        raise PositionError(_refusal(epoch, skip, at, got, wanted, takes_skip))

    def _first(
        self, make_dataset: MakeDataset, epoch: int, skip: int, steps_per_epoch: int
    ) -> str:
        """The fingerprint of the first batch the epoch positioned at ``skip``
        gives, built apart from the one that trains (its own Grain place)."""
        position = GrainPosition()
        position.restored(self._extras)
        dataset = epoch_dataset(
            make_dataset,
            epoch,
            skip=skip,
            steps_per_epoch=skip + 1,
            position=position,
        )
        return batch_hash(backend.current().first_batch_of(dataset))

    def _say(self, said: str, step: int) -> None:
        if self._events is not None:  # logged by the event log too
            self._events.emit("data.repositioned", said, level="warning", step=step)
        else:
            log.warning("[step %s] %s", step, said)


def _unskipped(make_dataset: MakeDataset) -> MakeDataset:
    """``make_dataset`` without its ``skip``: the agent positions what it gives."""

    def unskipped(epoch: int) -> Any:
        return make_dataset(epoch, skip=0)

    return unskipped


def _what(epoch: int, at: int, proven: bool) -> str:
    if proven:
        return "the batch trained there"
    return f"batch {at} drawn from make_dataset({epoch}, skip=0)"


def _repositioned(epoch: int, at: int, got: str, wanted: str, proven: bool) -> str:
    matched = (
        f"its batch {at} matches: the resume is exact"
        if proven
        else "no batch is trained twice"
    )
    return (
        f"make_dataset({epoch}, skip={at}) did not start at batch {at} of epoch "
        f"{epoch} (its first batch {got} is not {wanted}, "
        f"{_what(epoch, at, proven)}): its skip parameter is accepted and not "
        f"used, or used wrongly. The Grain pipeline is positioned by the agent "
        f"instead, and {matched}. Remove the skip parameter (Grain pipelines are "
        f"positioned by index or by their saved state)."
    )


def _refusal(
    epoch: int, skip: int, at: int, got: str, wanted: str, takes_skip: bool
) -> str:
    proven = at == skip
    head = (
        f"Resuming at batch {skip} of epoch {epoch} would train on other data "
        f"than the run trained there: make_dataset({epoch}, skip={at}) gives a "
        f"first batch of fingerprint {got}, {_what(epoch, at, proven)} {wanted}. "
    )
    if takes_skip:
        cause = (
            f"Likely cause: make_dataset's skip parameter is accepted and not used, "
            f"or used wrongly (make_dataset({epoch}, skip={skip}) must start at "
            f"batch {skip} of the epoch: skip whole batches, after the epoch's "
            f"shuffle, e.g. ds.batch(n).skip(skip)); or its shuffle is not seeded "
            f"from the epoch. Fix make_dataset, or drop its skip parameter to let "
            f"the agent position the data, and run again: the checkpoint is kept "
            f"and the run resumes from it."
        )
    else:
        cause = (
            f"Likely cause: make_dataset({epoch}) does not give the same batches "
            f"on every call, e.g. a shuffle not seeded from the epoch "
            f"(ds.shuffle(n, seed=epoch, reshuffle_each_iteration=False)) or "
            f"unseeded random augmentation. Fix make_dataset and run again: the "
            f"checkpoint is kept and the run resumes from it."
        )
    return head + cause

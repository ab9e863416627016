"""The batches handed to the model lately: what a checkpoint's position proof hashes.

A resume positions the epoch's pipeline after the batches already trained
(:mod:`colab_resume.agent.epochs`) and must prove that it did
(:mod:`colab_resume.agent.proof`). The proof is the fingerprint of the batch
the run trains next, taken here from the very batches the drivers hand to
the model, not from a pipeline built again: a ``make_dataset`` whose
``skip`` is wrong would position a rebuilt one just as wrongly.

A :class:`BatchTrail` keeps references (not copies) to the last few batches
by their place in the epoch and draws one batch ahead of the model, so that
at a save after ``place`` batches the next one is at hand; only a save
hashes a batch (one, :func:`colab_resume.agent.fingerprints.batch_hash`).
Keras reads a few batches ahead of the step it trains; the window is far
above that, and a save whose next batch has left it carries no proof (its
resume is not checked), which is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from colab_resume.agent.fingerprints import batch_hash

log = logging.getLogger(__name__)

# The checkpoint extras' entry: {"epoch": e, "batch": place, "fingerprint": h},
# h the fingerprint of batch `place` of epoch e (the next to train).
KEY = "position"
_END = object()


class BatchTrail:
    """References to the batches handed to the model, by (epoch, place).

    Args:
        window: batches kept (the newest); a bound on the memory the trail
            holds beyond the model's own read-ahead.
    """

    def __init__(self, window: int = 32) -> None:
        self._window = window
        self._epoch = -1
        self._batches: dict[int, Any] = {}
        # The place after the last batch handed on by `follow`: where a
        # driver that draws one batch a step stands (not Keras' fit, which
        # reads ahead).
        self.handed_on = 0
        self._view: Callable[[Any], Any] | None = None
        self._lookup: Callable[[int], Any] | None = None

    def follow(
        self,
        batches: Iterator[Any],
        epoch: int,
        first: int,
        *,
        view: Callable[[Any], Any] | None = None,
    ) -> Iterator[Any]:
        """``batches`` (batch ``first`` of ``epoch`` on), kept as they go by.

        Draws one batch ahead: when batch ``p`` is handed on, batch ``p + 1``
        (the one a save after it names) is already kept.

        Args:
            view: the global batch as host arrays, from what is handed on
                (a distributed batch's replicas, joined); applied only to
                the one batch a save hashes.
        """
        self._start(epoch)
        self._view, self._lookup = view, None
        place = first
        current = next(batches, _END)
        while current is not _END:
            self.handed(epoch, place, current)
            following = next(batches, _END)
            if following is not _END:
                self.handed(epoch, place + 1, following)
            self.handed_on = place + 1
            yield current
            place, current = place + 1, following

    def index(self, lookup: Callable[[int], Any], epoch: int) -> None:
        """``epoch``'s batches by place, from a source read by index (a Grain
        ``MapDataset`` handed to ``fit`` as it is): a save looks up the one
        batch it names instead of keeping the batches as they go by."""
        self._start(epoch)
        self._view, self._lookup = None, lookup

    def handed(self, epoch: int, place: int, batch: Any) -> None:
        """Keep ``batch``, batch ``place`` of ``epoch`` (for drivers that draw)."""
        self._start(epoch)
        self._batches[place] = batch
        while len(self._batches) > self._window:
            del self._batches[min(self._batches)]

    def extras(self, epoch: int, place: int) -> dict[str, Any]:
        """The proof a checkpoint after ``place`` batches of ``epoch`` carries.

        Empty at an epoch's end (the next epoch's first batch is checked by
        its own fingerprint) or where the batch is not at hand.
        """
        if epoch == self._epoch and place not in self._batches and self._lookup:
            try:
                self._batches[place] = self._lookup(place)
            except IndexError:  # the epoch's end
                return {}
        if epoch != self._epoch or place not in self._batches:
            if epoch == self._epoch and self._batches and place < max(self._batches):
                log.info(
                    "[epoch %d, batch %d] no position proof for this checkpoint: "
                    "the model read more than %d batches ahead",
                    epoch,
                    place,
                    self._window,
                )
            return {}
        for old in [p for p in self._batches if p < place]:
            del self._batches[old]
        batch = self._batches[place]
        fingerprint = batch_hash(self._view(batch) if self._view else batch)
        return {KEY: {"epoch": epoch, "batch": place, "fingerprint": fingerprint}}

    def _start(self, epoch: int) -> None:
        if epoch != self._epoch:
            self._epoch, self._batches, self._lookup = epoch, {}, None

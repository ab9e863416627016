"""What ``fit`` is handed for a Grain ``IterDataset``: a Grain ``IterDataset``.

A model's own ``fit`` may look at the kind of its input: keras-hub's task
models (``GemmaCausalLM``, ``BertTextClassifier``...) accept a Grain
``MapDataset`` or ``IterDataset`` (or a ``tf.data.Dataset``) and map their
preprocessing over it, and refuse a generator. So the agent hands them the
kind ``make_dataset`` returned: a ``MapDataset`` as its slice from the
resumed batch (:meth:`colab_resume.data.grain.GrainPosition.fed`), an
``IterDataset`` as :class:`PositionedIterDataset`, an ``IterDataset`` whose
iterator is already positioned and whose batches record the iterator's
state as they are drawn, for the checkpoint of the step they train.

Imports Grain at the top: imported only once ``make_dataset`` returned a
Grain pipeline (:mod:`colab_resume.data.grain` asks nothing of Grain).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grain

__all__ = ["PositionedIterDataset"]


class PositionedIterDataset(grain.IterDataset):  # type: ignore[misc]  # untyped
    """``wanted`` batches of an ``IterDataset`` from a resumed place.

    Args:
        first: the iterator ``fit`` gets on its first ``iter()``, already
            positioned and tracked by the caller (None: a new one).
        again: a new one, for any later ``iter()`` (Keras or a model's
            preprocessing may iterate more than once).
        source: the user's dataset (the parent that Grain's own
            ``str()``, ``parents`` and options propagation see).
    """

    def __init__(
        self,
        first: Any,
        again: Callable[[], Any],
        source: Any,
    ) -> None:
        super().__init__(source)
        self._first: Any = first
        self._again = again

    def __iter__(self) -> Any:
        batches, self._first = self._first, None
        return _Batches(batches if batches is not None else self._again())

    def follow_batches(self, follow: Callable[[Any], Any]) -> PositionedIterDataset:
        """The same batches, each iterator's passed through ``follow`` first
        (the agent's record of what it hands the model)."""
        first, again = self._first, self._again
        self._first = None
        return PositionedIterDataset(
            follow(first) if first is not None else None,
            lambda: follow(again()),
            self.parents[0],
        )

    def __str__(self) -> str:
        return "PositionedIterDataset"


class _Batches(grain.DatasetIterator):  # type: ignore[misc]  # untyped
    """A plain Python iterator of batches, as a Grain ``DatasetIterator``.

    Its state is the tracker's (the agent records the user's iterator's
    state itself); ``set_state`` is refused, as positioning is the agent's.
    """

    def __init__(self, batches: Any) -> None:
        super().__init__()
        self._batches = batches

    def __next__(self) -> Any:
        return next(self._batches)

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(
            "colab_resume positions this pipeline itself, from its checkpoint; "
            "its state cannot be set from outside."
        )

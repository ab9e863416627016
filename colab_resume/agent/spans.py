"""Several epochs in one ``model.fit`` call, where the model sees no difference.

The agent trains epoch by epoch because each epoch's data comes from its own
``make_dataset(epoch)`` call. One ``model.fit`` call per epoch is costly
under a ``tf.distribute`` strategy, though: every call first draws a batch
to build the model symbolically, through a multi-device iterator made for
that one batch and thrown away, and then makes another for the epoch. On
two CPU replicas each such iterator takes about a quarter of a second,
which on short epochs is most of what the agent cost over plain ``fit``.

So after the first epoch of a session, epochs are trained in spans of 2, 4,
... up to :data:`MAX_EPOCHS`: one ``fit`` call over the epochs' datasets
concatenated in order, each epoch still built by its own
``make_dataset(epoch)``. The first epoch stays alone, so the first step of
a session waits for one dataset, not many.

A span is only used where the calls' boundaries are invisible to the model
(:func:`boundaries_invisible`) and it cannot change what an epoch trains on:

- each epoch's dataset yields exactly ``steps_per_epoch`` batches, known
  before iterating (a finite dataset long enough, or a ``repeat()`` cut by
  the agent's ``take``), so no batch moves into another epoch;
- and it is known to yield the same batches however often it is iterated
  (:func:`colab_resume.data.graph.same_every_iteration`, an allow-list:
  what it does not know, a Keras random layer in ``map`` say, is no). Keras'
  symbolic build iterates the dataset it is given once before the epoch
  does; alone, every epoch trains on its dataset's second iteration, in a
  span the later epochs would train on their first. A ``shuffle`` that
  reshuffles at each iteration (its default) orders those two differently,
  and a resumed epoch, trained alone, would not see what the uninterrupted
  run saw. ``shuffle(n, seed=epoch, reshuffle_each_iteration=False)``
  keeps a new order every epoch (the seed) and allows spans.

The concatenation's length is hidden from Keras: knowing it, Keras would
make one more iterator after the span's last epoch, for an epoch that never
comes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from colab_resume import backend
from colab_resume.data import graph as dataset_graph

MAX_EPOCHS = 8


def next_length(length: int) -> int:
    """How many epochs the span after one of ``length`` epochs may hold."""
    return min(2 * length, MAX_EPOCHS)


def boundaries_invisible(model: Any, validation: Any, validation_steps: Any) -> bool:
    """True when where one ``fit`` call ends and the next begins changes
    nothing but the data's iterators.

    A run resumed mid-epoch splits its calls elsewhere than the run that was
    not interrupted, so whatever Keras does once per call must not matter:

    - validation made per epoch (a callable) needs a call per epoch;
    - with ``validation_steps``, Keras keeps the validation iterator for the
      whole call, so each evaluation would go on where the last one stopped,
      not from the start as in a call of its own;
    - an optimizer with ``use_ema`` puts its moving averages into the model
      at the end of every call (``finalize_variable_values``).
    """
    optimizer = getattr(model, "optimizer", None)
    return not (
        callable(validation)
        or (validation is not None and validation_steps is not None)
        or getattr(optimizer, "use_ema", False)
    )


def chainable(dataset: Any, steps: int) -> bool:
    """True when ``dataset`` yields exactly ``steps`` batches, known in
    advance, and the same batches however often it is iterated."""
    return int(dataset.cardinality()) == steps and dataset_graph.same_every_iteration(
        dataset
    )


def chain(datasets: Sequence[Any]) -> Any:
    """The datasets one after the other, as one dataset of unknown length.

    Raises:
        TypeError: their elements differ in structure or type.
    """
    if len(datasets) == 1:  # also every JAX epoch: no framework needed
        return datasets[0]
    return backend.current().chain(datasets)

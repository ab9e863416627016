"""NumPy batches as ``make_dataset`` may return them, on either backend.

``make_dataset(epoch)`` may return an iterable of batches (a list or a
generator of ``(x, y)`` tuples, or dicts, of NumPy arrays) or a
``keras.utils.PyDataset``, as Keras' own ``fit`` accepts: on JAX they are
fed as they are; on TensorFlow they become a ``tf.data.Dataset``
(:func:`colab_resume.backend.tensorflow.epoch_dataset`). Either way the
same rules make a resume exact: the same batches for the same epoch on
every call, a ``skip`` that drops the batches already trained, and the
first batch's fingerprint checked on resume (:mod:`colab_resume.agent.fingerprints`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from colab_resume.data.contract import DatasetError, accepts_skip
from colab_resume.data.grain import GrainPosition


def epoch_batches(
    make_dataset: Callable[..., Any],
    epoch: int,
    *,
    skip: int,
    steps_per_epoch: int,
    check: Callable[[Any], None] | None = None,
    position: GrainPosition | None = None,
) -> Iterator[Any]:
    """``make_dataset(epoch)``'s batches after ``skip``, as a generator.

    See :func:`epoch_input` for the arguments and errors.
    """
    fed = epoch_input(
        make_dataset,
        epoch,
        skip=skip,
        steps_per_epoch=steps_per_epoch,
        check=check,
        position=position,
    )
    batches = fed if hasattr(fed, "__next__") else iter(fed)
    return (batch for batch in batches)


def epoch_input(
    make_dataset: Callable[..., Any],
    epoch: int,
    *,
    skip: int,
    steps_per_epoch: int,
    check: Callable[[Any], None] | None = None,
    position: GrainPosition | None = None,
) -> Any:
    """``make_dataset(epoch)``'s batches after ``skip``, of the kind it returned.

    What a model's ``fit`` would get without the agent: a Grain
    ``MapDataset`` or ``IterDataset`` stays one (positioned), so that a
    model whose ``fit`` maps its own preprocessing over it (keras-hub's task
    models) can; any other iterable becomes a generator of its batches.

    Without a ``skip`` keyword the skipped batches are drawn and dropped. A
    PyDataset's worker processes are not used: its batches are read in
    order here.

    Args:
        check: called with what ``make_dataset`` returned, to refuse a kind
            the backend cannot take (raises ``DatasetError``).
        position: where the run's Grain pipeline stands; a Grain dataset is
            then positioned by its own state (:mod:`colab_resume.data.grain`).

    Raises:
        DatasetError: not iterable, or too short.
    """
    places_skip = accepts_skip(make_dataset)
    dataset = make_dataset(epoch, skip=skip) if places_skip else make_dataset(epoch)
    if check is not None:
        check(dataset)
    start = 0 if places_skip else skip
    wanted = steps_per_epoch - skip
    length = _length(dataset)
    if length is not None and length - start < wanted:
        raise DatasetError(
            f"make_dataset({epoch}) yields {length - start + skip} batches but "
            f"steps_per_epoch is {steps_per_epoch}. Lower steps_per_epoch, or "
            f"make make_dataset yield more batches.{_hint(dataset)}"
        )
    grain = (
        position.fed(dataset, epoch, drop=start, wanted=wanted)
        if position is not None and not places_skip
        else None
    )
    if grain is not None:
        return grain
    batches: Iterator[Any]
    if is_py_dataset(dataset):
        batches = (dataset[i] for i in range(start, start + wanted))
    else:
        try:
            iterator = iter(dataset)
        except TypeError:
            raise DatasetError(
                f"make_dataset({epoch}) returned {type(dataset).__name__}, which is "
                f"not iterable; return NumPy batches (a list or generator of (x, y) "
                f"tuples) or a keras.utils.PyDataset."
            ) from None
        batches = itertools.islice(iterator, start, start + wanted)
    return (batch for batch in batches)  # Keras' fit wants a real generator


def _hint(dataset: Any) -> str:
    """For ``[x, y]`` (whole arrays, not batches): what was meant, likely."""
    if isinstance(dataset, (list, tuple)) and all(
        hasattr(item, "shape") for item in dataset
    ):
        return (
            " A list is read as a list of batches; for whole arrays x and y "
            "return a list of (x, y) batch tuples, or a tf.data.Dataset "
            "(tf.data.Dataset.from_tensor_slices((x, y)).batch(n))."
        )
    return ""


def is_py_dataset(dataset: Any) -> bool:
    import keras

    return isinstance(dataset, keras.utils.PyDataset)


def _length(dataset: Any) -> int | None:
    if is_py_dataset(dataset):
        count = dataset.num_batches
        return int(count) if count is not None else None
    try:
        return len(dataset)
    except TypeError:
        return None

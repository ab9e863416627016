"""Grain pipelines, positioned by their own state instead of by skipping.

``make_dataset(epoch)`` may return a Grain ``MapDataset``, ``IterDataset``,
``DatasetIterator`` or ``DataLoader`` of global batches (Grain is what JAX
users feed models with; Colab's TPU runtime has no ``tf.data``). Each epoch
is its own pipeline, as with every other kind ``make_dataset`` returns;
seed its shuffles and random maps from the epoch (``.shuffle(seed=epoch)``)
or with a fixed seed, as Grain's own idiom does.

How an epoch resumed mid-way is positioned, without drawing a batch:

* A ``MapDataset`` is index-based: ``dataset[skip:]`` is the same batches
  from ``skip`` on (random maps are seeded by index), at no cost.
* An iterator (an ``IterDataset``'s, a ``DataLoader``'s) is positioned by
  ``set_state()`` with the state it had when the checkpoint's step was
  trained: the agent records ``get_state()`` after each batch it hands to
  Keras, keyed by the batch's place in the epoch (so batches Keras reads
  ahead do not move it), and every checkpoint carries the state of its step
  in the same commit (:data:`KEY` in the checkpoint's extras, JSON).
* Where no state was saved (a checkpoint from before, a ``make_dataset``
  that takes ``skip`` itself), the batches are drawn and dropped, as for
  any iterable: exact, at the pipeline's cost.

Across processes (JAX multi-process), where every process yields the
global batches (``data_sharding="global"``) they all hold the same state
and process 0's is saved. Where each process reads its own shard
(``data_sharding="per_process"``), every process's state and description
are gathered into the checkpoint at each save (one all-gather) and each
process restores its own. Resumed on another process count, an
``ElasticIterator`` (``grain.experimental``; one global position, the same
on every shard) continues from that position; any other pipeline is
positioned by drawing and dropping, which the agent says.

Each checkpoint also carries the pipeline's description (its stages, from
the last to the source, transforms named without their source location).
A resume whose pipeline differs is refused with both descriptions, like a
changed ``steps_per_epoch``: an iterator state means nothing to another
pipeline. The epoch's first-batch fingerprint
(:mod:`colab_resume.agent.fingerprints`) still checks the order itself.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from colab_resume.data.contract import DatasetError

KEY = "grain"
# GrainPosition.how, in words.
GRAIN_HOW = {
    "state": "by its iterator's saved state (set_state)",
    "index": "by index (a MapDataset slice)",
    "skipped": "by drawing and dropping the batches already trained (no state saved)",
    "elastic": "by its elastic iterator's global position, on another process count",
    "recounted": (
        "by drawing and dropping the batches already trained (the process count "
        "changed and its iterator is not elastic)"
    ),
}
# Batches recorded ahead of the newest save: Keras reads a few ahead, so a
# bound far above that keeps memory flat on an epoch of millions of steps.
_MAX_TRACKED = 4096
# A transform's source location (`<lambda> @ .../cell.py:3`) and object
# addresses change with every notebook run: not part of the pipeline.
_NOISE = re.compile(r" @ [^,)]*| at 0x[0-9a-f]+")


def is_grain(obj: Any) -> bool:
    """Whether ``obj`` is one of Grain's datasets, loaders or iterators.

    Read from the class's module: asking imports nothing.
    """
    return any(
        getattr(cls, "__module__", "").split(".")[0] == "grain"
        for cls in type(obj).__mro__
    )


def describe(dataset: Any) -> str:
    """The pipeline's stages, last first: ``Batch... < Shuffle... < Source...``."""
    stages, nodes = [], [dataset]
    while nodes:
        node = nodes.pop(0)
        if hasattr(node, "_sampler") and hasattr(node, "_data_source"):
            # A DataLoader: its sampler, source and operations say it all.
            operations = getattr(node, "_operations", ())
            stages.append(
                f"DataLoader(sampler={node._sampler}, "
                f"source={type(node._data_source).__name__}, "
                f"operations=[{', '.join(map(str, operations))}])"
            )
            continue
        if hasattr(node, "_global_batch_size") and hasattr(node, "_ds"):
            # An ElasticIterator: its shard options are left out, as they
            # differ from process to process and its position does not.
            stages.append(
                f"ElasticIterator(global_batch_size={node._global_batch_size})"
            )
            nodes.append(node._ds)
            continue
        stages.append(str(node))
        nodes.extend(getattr(node, "parents", ()) or ())
    return _NOISE.sub("", " < ".join(stages))


@dataclasses.dataclass(frozen=True)
class Shards:
    """This process among processes that each read their own shard.

    Attributes:
        index: this process.
        count: the processes.
        gather: every process's text, in process order (a collective: every
            process calls it at the same point).
    """

    index: int
    count: int
    gather: Callable[[str], list[str]]


class GrainPosition:
    """Where a run's Grain pipeline stands: saved with each checkpoint.

    One per training run (the driver owns it). :meth:`restored` takes what
    a checkpoint carried, :meth:`fed` positions an epoch's pipeline,
    :meth:`extras` gives what a checkpoint at a step must carry.

    Attributes:
        how: how the last epoch opened mid-way was positioned: ``"state"``
            (``set_state``), ``"index"`` (a ``MapDataset`` slice),
            ``"skipped"`` (drawn and dropped), None before one was.
    """

    def __init__(self, shards: Callable[[], Shards | None] = lambda: None) -> None:
        """``shards``: this process's shard, asked at each use (None: the
        batches are global, the same on every process)."""
        self._shards = shards
        self._saved: dict[str, Any] | None = None
        self._epoch = -1
        self._pipeline = ""
        self._states: dict[int, Any] = {}  # batches drawn in the epoch -> state
        self.how: str | None = None

    def restored(self, extras: dict[str, Any]) -> None:
        """Take the ``grain`` entry of a restored checkpoint's extras, if any."""
        saved = extras.get(KEY)
        self._saved = saved if isinstance(saved, dict) else None

    def check(self, make_dataset: Any, epoch: int, skip: int) -> bool:
        """Refuse a resume at (``epoch``, ``skip``) whose pipeline changed.

        Called before the epoch's first-batch fingerprint is compared, so
        that the refusal names the stages that differ. Builds the pipeline
        only when the checkpoint carried one (Grain's are lazy: cheap).

        Returns:
            True when the checkpoint was saved on another process count and
            the pipeline is an elastic iterator: it continues from its own
            global position, and each shard now holds other rows, so the
            first-batch fingerprints recorded before cannot be compared.

        Raises:
            DatasetError: the pipeline is not the checkpoint's.
        """
        if not self._saved:
            return False
        regrouped = len(self._parts()) != self._place()[1]
        if not regrouped and not self._saved_at(epoch, skip):
            return False
        dataset = make_dataset(epoch)
        if not is_grain(dataset):
            return False
        self._check_pipeline(describe(dataset), epoch, skip)
        return regrouped and _is_elastic(dataset)

    def fed(self, dataset: Any, epoch: int, *, drop: int, wanted: int) -> Any:
        """``dataset``'s batches from place ``drop`` on, ``wanted`` of them,
        of the kind ``dataset`` is: what ``fit`` would get.

        A ``MapDataset`` gives its slice (a ``MapDataset``), an
        ``IterDataset`` a positioned ``IterDataset``
        (:mod:`colab_resume.data.grain_fed`); an iterator or a ``DataLoader``
        gives an iterator of the batches. A model whose own ``fit`` maps its
        preprocessing over a Grain dataset (keras-hub's tasks) can do so.

        Returns None when ``dataset`` is not Grain's (the caller positions it).

        Raises:
            DatasetError: the checkpoint's pipeline is not this one, or its
                state does not fit this pipeline.
        """
        if not is_grain(dataset):
            return None
        pipeline = describe(dataset)
        self._check_pipeline(pipeline, epoch, drop)
        self._epoch, self._pipeline, self._states = epoch, pipeline, {}
        if _is_map_dataset(dataset):
            if drop:
                self.how = "index"
            return dataset[drop : drop + wanted]
        if _is_iter_dataset(dataset) and not hasattr(dataset, "__next__"):
            # (An ElasticIterator is both: an iterator, positioned in place.)
            from colab_resume.data.grain_fed import PositionedIterDataset

            def opened() -> Iterator[Any]:
                return self._opened(iter(dataset), epoch, drop, wanted)

            return PositionedIterDataset(opened(), opened, dataset)
        iterator = dataset if hasattr(dataset, "__next__") else iter(dataset)
        return self._opened(iterator, epoch, drop, wanted)

    def _opened(
        self, iterator: Any, epoch: int, drop: int, wanted: int
    ) -> Iterator[Any]:
        if drop:
            self._position(iterator, epoch, drop)
        return self._tracked(iterator, drop, wanted)

    def said(self) -> str:
        """How the last epoch opened mid-way was positioned, in words."""
        text = GRAIN_HOW.get(self.how or "", "")
        if self.how in ("elastic", "recounted"):
            text += f" (processes {len(self._parts())} -> {self._place()[1]})"
        return text

    def extras(self, epoch: int, place: int) -> dict[str, Any]:
        """What a checkpoint after ``place`` batches of ``epoch`` carries."""
        if epoch != self._epoch or not self._pipeline:
            return {}
        mine: dict[str, Any] = {"pipeline": self._pipeline}
        state = self._states.get(place)
        if state is not None:
            mine["state"] = _encoded(state)
        for old in [p for p in self._states if p < place]:
            del self._states[old]
        entry: dict[str, Any] = {"epoch": epoch, "batch": place}
        shards = self._shards()
        if shards is None:
            return {KEY: {**entry, **mine}}
        every = shards.gather(json.dumps(mine, sort_keys=True))
        return {KEY: {**entry, "processes": [json.loads(text) for text in every]}}

    def _saved_at(self, epoch: int, place: int) -> dict[str, Any] | None:
        """This process's part of the checkpoint's entry, if it was saved at
        ``place`` batches into ``epoch``.

        Where the checkpoint holds each process's part and the process count
        is the same, this process's own; where the count changed, no pipeline
        to compare (each shard's differs) and the state only if every
        process's was the same (an elastic iterator's), with ``"from"``: the
        count it was saved on.
        """
        saved = self._saved
        if not saved or saved.get("epoch") != epoch or saved.get("batch") != place:
            return None
        parts = self._parts()
        index, count = self._place()
        if len(parts) == count:
            return dict(parts[index])
        states = {json.dumps(p.get("state"), sort_keys=True) for p in parts}
        same = parts[0].get("state") if len(states) == 1 else None
        return {"pipeline": None, "state": same, "from": len(parts)}

    def _parts(self) -> list[dict[str, Any]]:
        """The saved entry per process (one: a single process's, or the
        global pipeline's that every process shared)."""
        saved = self._saved or {}
        parts = saved.get("processes")
        return parts if isinstance(parts, list) else [saved]

    def _place(self) -> tuple[int, int]:
        """(this process, processes) among those reading their own shards."""
        shards = self._shards()
        return (shards.index, shards.count) if shards else (0, 1)

    def _check_pipeline(self, pipeline: str, epoch: int, drop: int) -> None:
        saved = self._saved_at(epoch, drop)
        if saved and saved.get("pipeline") not in (None, pipeline):
            raise DatasetError(
                f"make_dataset({epoch}) is not the Grain pipeline the checkpoint "
                f"was trained on, so its place cannot be restored.\n"
                f"  checkpoint: {saved['pipeline']}\n"
                f"  now:        {pipeline}\n"
                f"Put the pipeline back as it was to resume exactly, or start a "
                f"new run directory for the new pipeline."
            )

    def _position(self, iterator: Any, epoch: int, drop: int) -> None:
        saved = self._saved_at(epoch, drop) or {}
        state = saved.get("state")
        recounted = "from" in saved
        if recounted and not _is_elastic(iterator):
            state = None  # a shard's state means nothing to another sharding
        if state is not None and hasattr(iterator, "set_state"):
            try:
                iterator.set_state(_decoded(state))
            except Exception as exc:  # Grain says why (a changed sampler...)
                raise DatasetError(
                    f"make_dataset({epoch})'s Grain iterator refused the state "
                    f"the checkpoint saved ({type(exc).__name__}: {exc}); was the "
                    f"pipeline changed?"
                ) from exc
            self.how = "elastic" if recounted else "state"
            return
        for _ in range(drop):
            next(iterator)
        self.how = "recounted" if recounted else "skipped"

    def _tracked(self, iterator: Any, first: int, wanted: int) -> Iterator[Any]:
        """Yield the batches, keeping the state after each: a save after
        ``place`` batches needs the state the iterator had then, whether or
        not Keras has already drawn the next one."""
        states = self._states
        savable = hasattr(iterator, "get_state")
        if savable:
            states[first] = iterator.get_state()
        for place in range(first, first + wanted):
            try:
                batch = next(iterator)
            except StopIteration:
                return
            if savable:
                states[place + 1] = iterator.get_state()
                if len(states) > _MAX_TRACKED:
                    del states[min(states)]
            yield batch


def _is_elastic(iterator: Any) -> bool:
    """Grain's ``ElasticIterator``: one global position, valid on any sharding."""
    return any(cls.__name__ == "ElasticIterator" for cls in type(iterator).__mro__)


def _is_map_dataset(dataset: Any) -> bool:
    import grain

    return isinstance(dataset, grain.MapDataset)


def _is_iter_dataset(dataset: Any) -> bool:
    import grain

    return isinstance(dataset, grain.IterDataset)


def _encoded(state: Any) -> Any:
    """A state as JSON can carry it (a DataLoader's is JSON in bytes)."""
    if isinstance(state, bytes):
        return {"bytes": state.decode("utf-8")}
    try:
        json.dumps(state)
    except (TypeError, ValueError) as exc:
        raise DatasetError(
            f"The Grain iterator's state is not JSON ({exc}), so a checkpoint "
            f"cannot carry it."
        ) from exc
    return state


def _decoded(state: Any) -> Any:
    if isinstance(state, dict) and set(state) == {"bytes"}:
        return state["bytes"].encode("utf-8")
    return state

"""``agent.run``: the same guarantees for hand-written training steps.

The user gives three functions:

- ``build_state()`` — called inside a fresh ``strategy.scope()``; returns a
  dict of the trackables to save (``{"model": m, "optimizer": opt, ...}``);
- ``make_dataset(epoch)`` — global batches, deterministic per epoch;
- ``train_step(state, batch)`` — one step *on one replica*: the agent runs
  it with ``strategy.run`` inside a ``tf.function``, so it sees the
  per-replica slice of the batch and should scale its loss by the global
  batch size (``tf.nn.compute_average_loss``). Scalars it returns (a tensor
  or a dict of them) are recorded as metrics.

On the JAX backend there is no ``strategy.run``: ``train_step(state,
batch)`` is called with the *global* batch, laid out over the devices by
the ``keras.distribution``, and computes one step for all of them — with
Keras' stateless API (``model.stateless_call``,
``optimizer.stateless_apply``) under ``jax.jit`` or with plain JAX — then
assigns the new values to the state's variables, which is what checkpoints
hold. What it returns is recorded as it is. Across processes (JAX
multi-host) the batch is still the global one, assembled from every
process's rows; Keras' ``model.train_on_batch`` wants this process's rows
instead: ``model.train_on_batch(*colab_resume.process_rows(batch))``.

On TensorFlow, every returned value is **summed** across replicas, as the TensorFlow
distributed-training tutorial does with
``strategy.reduce(SUM, per_replica_losses)``: each replica returns its
share of the global-batch value. A loss scaled by the global batch size
then sums to the true loss, the same on 1 replica or 8. Return other
values the same way, as contributions to the global batch (correct
predictions divided by the global batch size, a count as is); a value that
is the same on every replica (a learning rate) would come out multiplied
by the replica count, so divide it by
``tf.distribute.get_replica_context().num_replicas_in_sync``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from colab_resume import backend
from colab_resume.agent.driver import Snapshot
from colab_resume.agent.epochs import epoch_dataset, split_step
from colab_resume.agent.fingerprints import DataFingerprints
from colab_resume.agent.proof import PositionProof
from colab_resume.agent.steps import StepDuties
from colab_resume.agent.trail import BatchTrail
from colab_resume.agent.values import check_callable, scalars
from colab_resume.backend import jax_distributed
from colab_resume.checkpoint import RestoredInfo
from colab_resume.data.cost import RebuildWatch
from colab_resume.errors import ColabResumeError
from colab_resume.events import EventLog
from colab_resume.validate import check_int

log = logging.getLogger(__name__)


class StateError(ColabResumeError, ValueError):
    """``build_state`` returned something the agent cannot checkpoint."""


class CustomLoop:
    """Drives a user's ``train_step`` for :meth:`Agent.run`."""

    def __init__(
        self,
        build_state: Callable[[], dict[str, Any]],
        make_dataset: Callable[..., Any],
        train_step: Callable[[dict[str, Any], Any], Any],
        *,
        total_steps: int,
        steps_per_epoch: int,
        reset_fingerprints: bool = False,
        events: EventLog | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        check_callable("build_state", build_state)
        check_callable("make_dataset", make_dataset)
        check_callable("train_step", train_step)
        check_int("total_steps", total_steps)
        check_int("steps_per_epoch", steps_per_epoch)
        self.warn = warn or (lambda message: log.warning("%s", message))
        self.build_state = build_state
        self.make_dataset = make_dataset
        self.train_step = train_step
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.state: dict[str, Any] = {}
        self.fingerprints = DataFingerprints(
            make_dataset, reset=reset_fingerprints, events=events
        )
        self.rebuild_watch = RebuildWatch(self.warn)
        # The batches handed to train_step, and the proof of a resume's
        # position (data/proof.py).
        self.trail = BatchTrail()
        self.proof = PositionProof(events, reset=reset_fingerprints)
        self.epoch = 0
        self._first_place = 0  # of the epoch being trained
        self._start_epoch = 0
        self.last_outputs: Any = None  # tensors; converted only when saved or shown

    def build(self) -> None:
        state = self.build_state()
        if not isinstance(state, dict) or not state:
            raise StateError(
                f"build_state() returned {type(state).__name__}; it must return a "
                f"non-empty dict of the things to checkpoint, e.g. "
                f"{{'model': model, 'optimizer': optimizer}}."
            )
        bad = [k for k in state if not isinstance(k, str)]
        if bad:
            raise StateError(f"build_state() keys must be strings, got {bad!r}.")
        self.state = state

    def restored(self, info: RestoredInfo | None) -> int:
        if info is None:
            return 0
        self.fingerprints.restored(info.extras, info.step)
        self.proof.restored(info.extras)
        return info.step

    def metrics(self) -> dict[str, Any]:
        return _metrics(self.last_outputs)

    def snapshot(self) -> Snapshot:
        extras = {
            **self.fingerprints.extras(),
            **self.trail.extras(self.epoch, self.trail.handed_on),
        }
        return Snapshot(self.state, self.epoch, self.metrics(), extras)

    def train(self, start_step: int, duties: StepDuties, strategy: Any) -> None:
        # The backend steps: a tf.function over the strategy, or JAX's
        # train_step on batches laid out over the devices.
        backend.current().train_custom(self, start_step, duties, strategy)

    def follow(
        self,
        batches: Iterator[Any],
        epoch: int,
        view: Callable[[Any], Any] | None = None,
    ) -> Iterator[Any]:
        """The backend's batches of ``epoch``, kept as handed to ``train_step``
        (:mod:`colab_resume.agent.trail`); across processes, as they are."""
        if jax_distributed.process_count() > 1:
            return batches  # each process's rows: no global batch to hash
        return self.trail.follow(batches, epoch, self._first_place, view=view)

    @property
    def start_epoch(self) -> int:
        """The epoch training resumed in (set by the first :meth:`epochs` item)."""
        return self._start_epoch

    def epochs(self, start_step: int) -> Iterator[tuple[int, Any, int]]:
        """``(epoch, its dataset positioned at the resumed step, steps in it)``."""
        return self._epochs(start_step)

    def _epochs(self, start_step: int) -> Iterator[tuple[int, Any, int]]:
        """``(epoch, its dataset positioned at the resumed step, steps in it)``."""
        step = start_step
        self._start_epoch, skip = split_step(start_step, self.steps_per_epoch)
        resumed_make = self.make_dataset
        if start_step:
            self.fingerprints.check(self._start_epoch)
            if jax_distributed.process_count() == 1:
                resumed_make = self.proof.check(
                    self.make_dataset, self._start_epoch, skip, self.steps_per_epoch
                )
        epoch = self._start_epoch
        while step < self.total_steps:
            self.epoch = epoch
            started = time.perf_counter()
            self.fingerprints.record(epoch)  # a build and its first batch
            here = skip if epoch == self._start_epoch else 0
            steps = min(self.steps_per_epoch - here, self.total_steps - step)
            dataset = epoch_dataset(
                resumed_make if epoch == self._start_epoch else self.make_dataset,
                epoch,
                skip=here,
                steps_per_epoch=here + steps,
            )
            self._first_place = here
            if backend.current().reads_pipeline_graphs:
                self.rebuild_watch.check(
                    dataset, epoch=epoch, seconds=time.perf_counter() - started
                )
            yield epoch, dataset, steps
            step += steps
            epoch += 1


def _metrics(outputs: Any) -> dict[str, float]:
    """What ``train_step`` returned (a tensor, or a dict of them) as metrics."""
    if outputs is None:
        return {}
    return scalars(outputs if isinstance(outputs, dict) else {"loss": outputs})

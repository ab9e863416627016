"""Keras on TensorFlow: ``tf.data`` epochs, ``tf.function`` steps, TF checkpoints.

The one place (with the TensorFlow checkpoint format,
:mod:`colab_resume.checkpoint.formats.tensorflow`) that imports TensorFlow for the
agent, the data path and the checkpoints. TensorFlow is imported inside
each function, so importing this module imports no framework.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from colab_resume.backend.base import CustomLoop, StepHooks
from colab_resume.backend.host_pieces import HostPieces
from colab_resume.backend.numpy_batches import epoch_batches
from colab_resume.backend.tf_devices import is_default
from colab_resume.data.contract import DatasetError, accepts_skip

if (
    TYPE_CHECKING
):  # annotations only: the accelerator asks this module for its connector
    from colab_resume.backend.connector import Connecting, Connector
    from colab_resume.data.grain import GrainPosition


def tf_variable(variable: Any) -> Any:
    """The TensorFlow variable behind a Keras variable, where there is one.

    Keras 3's own hook for TF's async checkpointing creates a ``tf.Variable``
    inside a ``tf.function`` on every save, which fails from the second save
    on ("tf.function only supports singleton tf.Variables"). The TF variable
    underneath (a MirroredVariable under MirroredStrategy) saves and
    restores the same values without that hook.
    """
    import tensorflow as tf

    inner = getattr(variable, "value", None)
    return inner if isinstance(inner, tf.Variable) else variable


def epoch_dataset(
    make_dataset: Callable[..., Any],
    epoch: int,
    *,
    skip: int,
    steps_per_epoch: int,
    position: GrainPosition | None = None,
) -> Any:
    """See :meth:`Backend.epoch_dataset`: a ``tf.data.Dataset`` of the epoch.

    Raises:
        DatasetError: it is too short, or neither a ``tf.data.Dataset`` nor
            NumPy batches (:func:`numpy_dataset`).
    """
    import tensorflow as tf

    places_skip = accepts_skip(make_dataset)
    dataset = make_dataset(epoch, skip=skip) if places_skip else make_dataset(epoch)
    if not isinstance(dataset, tf.data.Dataset):
        # NumPy batches, as Keras' fit takes them: the same script on both backends.
        return numpy_dataset(
            make_dataset,
            epoch,
            skip=skip,
            steps_per_epoch=steps_per_epoch,
            position=position,
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


def numpy_dataset(
    make_dataset: Callable[..., Any],
    epoch: int,
    *,
    skip: int,
    steps_per_epoch: int,
    position: GrainPosition | None = None,
) -> Any:
    """``make_dataset(epoch)``'s NumPy batches after ``skip`` as a ``tf.data.Dataset``.

    Each iteration calls ``make_dataset`` again (a generator is read once),
    which the dataset contract allows: the same batches for the same epoch
    on every call. The element spec is the first batch's, its batch
    dimension left open.

    Raises:
        DatasetError: not batches, too short, or no batch at all.
    """
    import numpy as np
    import tensorflow as tf

    def batches() -> Any:
        for batch in epoch_batches(
            make_dataset,
            epoch,
            skip=skip,
            steps_per_epoch=steps_per_epoch,
            position=position,
        ):
            yield _tuples(batch)

    first = next(batches(), None)
    if first is None:
        raise DatasetError(
            f"make_dataset({epoch}) returned no batch; it must return a "
            f"tf.data.Dataset of global batches, or NumPy batches (a list or "
            f"generator of (x, y) tuples of arrays, or a keras.utils.PyDataset)."
        )
    try:
        spec = tf.nest.map_structure(
            lambda a: tf.TensorSpec(
                (None, *np.shape(a)[1:]), tf.as_dtype(np.asarray(a).dtype)
            ),
            first,
        )
    except (TypeError, ValueError) as exc:
        raise DatasetError(
            f"make_dataset({epoch}) yields batches of {type(first).__name__}, "
            f"not arrays ({exc}); return a tf.data.Dataset, or (x, y) tuples of "
            f"NumPy arrays."
        ) from None
    return tf.data.Dataset.from_generator(batches, output_signature=spec)


def _joined(strategy: Any) -> Callable[[Any], Any]:
    """A distributed batch as the global batch it was split from, host arrays
    (the replicas' parts hold consecutive rows of it)."""
    import numpy as np
    import tensorflow as tf

    def join(batch: Any) -> Any:
        return tf.nest.map_structure(
            lambda value: np.concatenate(
                [
                    np.asarray(part)
                    for part in strategy.experimental_local_results(value)
                ]
            ),
            batch,
        )

    return join


def _tuples(batch: Any) -> Any:
    """Lists as tuples, all the way down: tf.data's structures are tuples."""
    if isinstance(batch, list):
        return tuple(_tuples(part) for part in batch)
    if isinstance(batch, tuple):
        return tuple(_tuples(part) for part in batch)
    if isinstance(batch, dict):
        return {key: _tuples(part) for key, part in batch.items()}
    return batch


def check_global_batch(dataset: Any, replicas: int, epoch: int) -> None:
    """Refuse batches that cannot be split evenly over ``replicas``.

    TensorFlow would fail deep inside the step with a shape error (``AddN``,
    ``[17,8] != [16,8]``) on the first uneven batch.

    Raises:
        DatasetError: a batch's size is not a multiple of ``replicas``.
    """
    import tensorflow as tf

    if replicas <= 1:
        return
    first = tf.nest.flatten(dataset.element_spec)[0]
    size = first.shape[0] if first.shape.rank else None
    if size is None:  # not static (no drop_remainder): look at the first batch
        for batch in dataset.take(1):
            size = int(tf.nest.flatten(batch)[0].shape[0])
    if size is not None and size % replicas:
        good = max(replicas, size - size % replicas)
        raise DatasetError(
            f"make_dataset({epoch}) yields batches of {size} examples, which "
            f"cannot be split evenly over {replicas} replicas. Batch by a "
            f"multiple of {replicas} (e.g. {good}) — the global batch — with "
            f".batch(n, drop_remainder=True) so no short batch remains."
        )


class TensorFlowBackend:
    """:class:`~colab_resume.backend.base.Backend` for Keras on TensorFlow."""

    name = "tensorflow"
    portable_only = False
    chains_epochs = True
    reads_pipeline_graphs = True

    def require(self) -> None:
        from colab_resume.backend.install import import_tensorflow, require_keras

        import_tensorflow()
        require_keras("'keras>=3'")

    def connector(self, accelerator: Connecting) -> Connector:
        from colab_resume.backend.tf_connect import TensorFlowConnector

        return TensorFlowConnector(accelerator)

    def variable_types(self) -> tuple[type, ...]:
        import tensorflow as tf

        return (tf.Variable,)

    def generator_types(self) -> tuple[type, ...]:
        import tensorflow as tf

        return (tf.random.Generator,)

    def variable_scope(self, model: Any) -> contextlib.AbstractContextManager[Any]:
        import tensorflow as tf

        strategy = getattr(model, "distribute_strategy", None)
        return (strategy or tf.distribute.get_strategy()).scope()  # type: ignore[no-any-return]

    def epoch_dataset(
        self,
        make_dataset: Callable[..., Any],
        epoch: int,
        *,
        skip: int,
        steps_per_epoch: int,
        position: GrainPosition | None = None,
    ) -> Any:
        return epoch_dataset(
            make_dataset,
            epoch,
            skip=skip,
            steps_per_epoch=steps_per_epoch,
            position=position,
        )

    def first_batch_of(self, dataset: Any) -> Any:
        return next(iter(dataset.take(1)), None)

    def check_first_batch(
        self, make_dataset: Callable[..., Any], dataset: Any, epoch: int, model: Any
    ) -> None:
        replicas = model.distribute_strategy.num_replicas_in_sync
        check_global_batch(dataset, replicas, epoch)

    def chain(self, datasets: Sequence[Any]) -> Any:
        import tensorflow as tf

        combined = datasets[0]
        for dataset in datasets[1:]:
            combined = combined.concatenate(dataset)
        # A filter that keeps everything: its output's length is unknown to
        # tf.data (see agent/spans.py), at a negligible cost per batch.
        return combined.filter(lambda *batch: tf.constant(True))

    def describe_distribution(self, strategy: Any, model: Any) -> dict[str, Any]:
        """The strategy's kind and replicas (TensorFlow replicates variables)."""
        if strategy is None:
            return {}
        kind = (
            "default (one device)" if is_default(strategy) else type(strategy).__name__
        )
        return {"kind": kind, "replicas": int(strategy.num_replicas_in_sync)}

    def fit_input(self, dataset: Any, model: Any) -> tuple[Any, Callable[[], None]]:
        """The dataset distributed as Keras would, its iterators deleted off
        the training thread (see :mod:`~colab_resume.backend.tf_iterators`).

        A model with a ``fit`` of its own (keras-hub's task models map their
        preprocessing over a ``tf.data.Dataset`` and refuse a distributed
        one) gets the dataset itself, as it would without the agent.
        """
        import keras

        from colab_resume.backend.tf_iterators import fit_input

        _record_default_strategy(model)
        if type(model).fit is not keras.Model.fit:
            return dataset, lambda: None
        return fit_input(dataset, model.distribute_strategy)

    def random_op_watch(self) -> Any:
        from colab_resume.backend.random_ops import RandomOpWatch

        try:
            from tensorflow.python.framework import op_callbacks
        except ImportError:  # a TensorFlow without the hook: nothing to watch
            return RandomOpWatch(None)
        return RandomOpWatch(op_callbacks)

    def sync_fit_state(self, model: Any) -> None:
        """Nothing: TensorFlow's trainer updates the variables themselves."""

    def outside_scope(self, model: Any) -> bool:
        import tensorflow as tf

        if not tf.distribute.has_strategy():
            return False  # built for a test or a tool, outside any scope
        # A private attribute: Keras's public distribute_strategy falls back to
        # the strategy in scope, which would hide the difference.
        missing = object()
        recorded = getattr(model, "_distribute_strategy", missing)
        return recorded is not missing and recorded is not tf.distribute.get_strategy()

    def host_variable(self, shape: tuple[int, ...], dtype: str) -> Any:
        import tensorflow as tf

        with tf.device("/cpu:0"), tf.init_scope():
            return tf.Variable(tf.zeros(shape, dtype), trainable=False)

    def train_custom(
        self, loop: CustomLoop, start_step: int, duties: StepHooks, strategy: Any
    ) -> None:
        import tensorflow as tf

        state, user_step = loop.state, loop.train_step

        @tf.function  # type: ignore[untyped-decorator]  # tensorflow: untyped
        def distributed_step(batch: Any) -> Any:
            outputs = strategy.run(user_step, args=(state, batch))
            # SUM, not MEAN: the replicas' values are shares of the global
            # batch's (see agent/custom_loop.py).
            return tf.nest.map_structure(
                lambda v: strategy.reduce("SUM", v, axis=None), outputs
            )

        watch = self.random_op_watch()
        for epoch, dataset, steps in loop.epochs(start_step):
            if epoch == loop.start_epoch:
                check_global_batch(dataset, strategy.num_replicas_in_sync, epoch)
            # Drawn here, not inside the step: the loop keeps the batches
            # handed on for the position proof a save carries.
            distributed = iter(strategy.experimental_distribute_dataset(dataset))
            batches = loop.follow(distributed, epoch, view=_joined(strategy))
            for _ in range(steps):
                batch = next(batches)
                duties.before_step()
                if watch is not None:  # the first call traces the step
                    with watch:
                        outputs = distributed_step(batch)
                    if warning := watch.warning():
                        loop.warn(warning)
                    watch = None
                else:
                    outputs = distributed_step(batch)
                # Converting to Python here would wait for the device every step.
                loop.last_outputs = outputs
                if duties.after_step(duties.step + 1):
                    return

    def read_value(self, variable: Any, *, whole: bool = False) -> Any:
        # read_value() of a MirroredVariable gives one replica's value.
        return tf_variable(variable).read_value()

    def own_pieces(self, variable: Any) -> HostPieces | None:
        return None  # one process holds TensorFlow's variables whole

    def assign_pieces(self, variable: Any, pieces: HostPieces, dtype: Any) -> None:
        # A JAX run's sharded variable, put together for TensorFlow's.
        variable.assign(pieces.whole().astype(dtype, copy=False))

    def fused_reader(self, variables: list[Any]) -> Callable[[], list[Any]] | None:
        import tensorflow as tf

        inner = [tf_variable(v) for v in variables]
        reader: Callable[[], list[Any]] = tf.function(
            lambda: [v.read_value() for v in inner]
        )
        return reader


def _record_default_strategy(model: Any) -> None:
    """Record TensorFlow's default strategy on ``model`` if it recorded none.

    Keras records the strategy in scope when a model is created, and builds
    the compile metrics at the start of ``fit`` when there is one. The
    default strategy (one device) has no scope to record, and Keras then
    builds them at the first traced step: after a resumed epoch's metric
    state is put back, which would find nothing to restore into. Recorded,
    the model trains exactly as before (``distribute_strategy`` already
    answered the default strategy) and its metrics exist when ``fit`` begins.
    (A private attribute: Keras offers no public way to set it.)
    """
    import tensorflow as tf

    if getattr(model, "_distribute_strategy", False) is None:
        model._distribute_strategy = tf.distribute.get_strategy()

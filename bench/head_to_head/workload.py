"""The one workload every contender trains: same model, same data, same seeds.

A 2.1M-parameter MLP classifier (Dense, Dropout, BatchNormalization, Adam;
~25 MB of checkpointed variables with the Adam slots) on synthetic data,
under a 2-replica ``MirroredStrategy`` over 2 logical CPU devices with op
determinism, so two runs can be compared bitwise.

The dataset is index-first: shuffle and skip cheap indices, then gather the
examples. Its order is the same every epoch (shuffled once, with a fixed
seed). That is deliberate: it gives Keras ``BackupAndRestore`` its best
case, because Keras can only replay an interrupted epoch from its first
batch and a dataset reshuffled per iteration would hand the replay a
different order than the uninterrupted run saw.
"""

from __future__ import annotations

import dataclasses
from typing import Any

FEATURES = 1024
HIDDEN = 1024
CLASSES = 10
EXAMPLES = 4096  # up to 64 steps per epoch
BATCH = 64  # global batch: 32 per replica
REPLICAS = 2
SEED = 7


@dataclasses.dataclass(frozen=True, kw_only=True)
class Schedule:
    """How long the run is and how often contenders save.

    Attributes:
        epochs: epochs of the run.
        steps_per_epoch: batches per epoch (at most EXAMPLES // BATCH).
        save_every: save every this many steps (every contender).
    """

    epochs: int = 4
    steps_per_epoch: int = 20
    save_every: int = 10

    def __post_init__(self) -> None:
        if not 1 <= self.steps_per_epoch <= EXAMPLES // BATCH:
            raise ValueError(
                f"steps_per_epoch must be in 1..{EXAMPLES // BATCH}, got "
                f"{self.steps_per_epoch}."
            )

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


def setup_determinism() -> None:
    """Seeds and op determinism; call after the strategy exists."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    tf.config.experimental.enable_op_determinism()


def mirrored_strategy() -> Any:
    """2 logical CPU devices and a MirroredStrategy over them (before any TF op)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(REPLICAS)]
    )
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(names)


def build_model() -> Any:
    """The compiled Keras model (call inside the strategy scope)."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.BatchNormalization(),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


class Data:
    """The examples (made once per process, the same in every process)."""

    def __init__(self) -> None:
        import numpy as np

        rng = np.random.RandomState(0)
        x = rng.randn(EXAMPLES, FEATURES).astype("float32")
        y = (x[:, :CLASSES] + 0.5 * rng.randn(EXAMPLES, CLASSES)).argmax(axis=1)
        self.x, self.y = x, y.astype("int64")

    def make_dataset(self, epoch: int = 0, skip: int = 0) -> Any:
        """Global batches of an epoch, ``skip`` batches skipped index-first."""
        import tensorflow as tf

        del epoch  # the same order every epoch: see the module docstring
        x, y = tf.constant(self.x), tf.constant(self.y)
        indices = tf.data.Dataset.range(EXAMPLES).shuffle(
            EXAMPLES, seed=SEED, reshuffle_each_iteration=False
        )
        batches = indices.batch(BATCH, drop_remainder=True).skip(skip)
        return batches.map(lambda i: (tf.gather(x, i), tf.gather(y, i)))


def variables_of(model: Any) -> dict[str, Any]:
    """Every model and optimizer variable as numpy, keyed by position and path."""
    variables = list(model.variables) + list(model.optimizer.variables)
    return {
        f"v{i:03d}_{v.path.replace('/', '_')}": v.numpy()
        for i, v in enumerate(variables)
    }

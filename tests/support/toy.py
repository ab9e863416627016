"""The small Keras workload the worker processes train.

Imports Keras and NumPy lazily: test processes that never train stay light.
The data is a noiseless linear regression; the model is Dense layers with,
unless ``plain``, Dropout (its RNG state must survive a resume) and
BatchNormalization (its moving statistics must too).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def regression(examples: int, features: int = 8, seed: int = 0) -> tuple[Any, Any]:
    """``(x, y)`` float32 arrays, ``y = x @ w`` for a random ``w``."""
    import numpy as np

    rng = np.random.RandomState(seed)
    x = rng.randn(examples, features).astype("float32")
    y = (x @ rng.randn(features, 1)).astype("float32")
    return x, y


def epoch_batches(x: Any, y: Any, batch: int, shuffle_seed: int) -> Any:
    """One epoch of ``(x, y)`` as a ``tf.data.Dataset``: shuffled, whole batches."""
    import tensorflow as tf

    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=shuffle_seed)
        .batch(batch, drop_remainder=True)
    )


def at_step(step: int, action: Any) -> Any:
    """A Keras callback calling ``action()`` once, after global batch ``step``
    (1-based) of the ``fit`` it is given to."""
    import keras

    class AtStep(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.seen = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.seen += 1
            if self.seen == step:
                action()

    return AtStep()


def tiny_fit_parts() -> tuple[Any, Any]:
    """``(build_model, dataset)`` for the smallest real ``agent.fit``: one
    Dense layer on 64 examples in batches of 8 (8 steps an epoch)."""
    import numpy as np
    import tensorflow as tf

    x = np.random.RandomState(0).randn(64, 4).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(8)
    return tiny_model, data


def tiny_model() -> Any:
    """A compiled ``Dense(1)`` on 4 features, SGD, MSE: the smallest model."""
    import keras

    built = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    built.compile(optimizer="sgd", loss="mse")
    return built


def model(
    *,
    features: int = 8,
    width: int = 32,
    dropout: float | None = 0.25,
    batch_norm: bool = True,
    learning_rate: float = 1e-2,
    metrics: Iterable[str] | None = ("mae",),
) -> Any:
    """A compiled ``Dense(width) [Dropout] [BatchNorm] Dense(1)``, Adam, MSE."""
    import keras

    layers: list[Any] = [keras.Input((features,))]
    layers.append(keras.layers.Dense(width, activation="relu"))
    if dropout:
        layers.append(keras.layers.Dropout(dropout))
    if batch_norm:
        layers.append(keras.layers.BatchNormalization())
    layers.append(keras.layers.Dense(1))
    built = keras.Sequential(layers)
    built.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss="mse",
        metrics=list(metrics) if metrics else None,
    )
    return built


def save_variables(path: str, variables: Iterable[Any]) -> None:
    """Write variables to ``path`` (.npz), named by position and Keras path."""
    import numpy as np

    arrays = {
        f"v{i:03d}_{v.path.replace('/', '_')}": np.asarray(v.numpy())
        for i, v in enumerate(variables)
    }
    np.savez(path, **arrays)

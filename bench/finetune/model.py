"""The fine-tune every contender trains: a LoRA fine-tune in miniature.

``layers`` Dense layers of ``width`` units whose kernels ``enable_lora(4)``
froze (the base: ``layers * width^2 * 4`` bytes) and a trained head, Adam.
"""

from __future__ import annotations

from typing import Any

BATCH = 8


def build(width: int, layers: int) -> Any:
    """A fresh compiled model, the same weights every time.

    Keras' names are reset first: Orbax stores the state by variable path
    (``sequential/base_0/kernel``), so a model restored into in this process
    must be named as the one saved, as it would be in a new process.
    """
    import keras

    keras.backend.clear_session()
    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [keras.Input((width,))]
        + [keras.layers.Dense(width, name=f"base_{i}") for i in range(layers)]
        + [keras.layers.Dense(1, name="head")]
    )
    for i in range(layers):
        model.get_layer(f"base_{i}").enable_lora(4)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


def batches(width: int, steps: int, seed: int) -> tuple[Any, Any]:
    """``steps`` batches of inputs and targets, as arrays."""
    import numpy as np

    x = np.random.default_rng(seed).standard_normal((steps * BATCH, width))
    x = x.astype("float32")
    return x, x[:, :1]


def step(model: Any, width: int, seed: int) -> None:
    """One training step."""
    x, y = batches(width, 1, seed)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)


def changing_bytes(model: Any) -> int:
    """Bytes a step changes: trainable variables, optimizer slots, counters."""
    import numpy as np

    variables = [*model.trainable_variables, *model.optimizer.variables]
    return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)


def frozen_kernels(model: Any) -> list[Any]:
    """The base's kernels: the variables ``"rebuild"`` fingerprints."""
    trainable = {id(v) for v in model.trainable_variables}
    return [
        v
        for v in model.weights
        if id(v) not in trainable and v.path.endswith("/kernel")
    ]


def same_state(trained: Any, restored: Any) -> bool:
    """Whether every weight and optimizer variable came back bitwise."""
    import numpy as np

    pairs = [
        *zip(trained.weights, restored.weights, strict=True),
        *zip(trained.optimizer.variables, restored.optimizer.variables, strict=True),
    ]
    return all(np.array_equal(a.numpy(), b.numpy()) for a, b in pairs)

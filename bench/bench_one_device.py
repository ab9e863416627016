"""Step time on one TensorFlow device: the agent without ``OneDeviceStrategy``.

    python bench/bench_one_device.py [--rounds 5] [--steps 600]

On one device the agent trains under TensorFlow's default strategy, as
plain Keras does; it used to wrap that device in ``OneDeviceStrategy``,
whose distributed iterator and ``run`` wrapper cost something every step.
In one process, rounds interleaved so the machine's load hits them alike,
each contender trains a fresh small model (a step of about a millisecond
on a CPU, where a per-step cost shows) for ``--steps`` steps with no save
inside the timed window:

- plain ``model.fit`` (the baseline);
- ``agent.fit`` on one device (TensorFlow's default strategy);
- ``agent.fit`` with ``strategy=tf.distribute.OneDeviceStrategy("/cpu:0")``
  (what the agent built before).

The steady step is the median gap between batch ends after the first 50
steps (tracing and warm-up). Prints each contender's median over rounds,
in ms and as a ratio to plain ``fit``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WARM_UP = 50
BATCH = 32
FEATURES = 16


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=600)
    return parser.parse_args()


def build() -> Any:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model


def dataset(steps: int) -> Any:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((steps * BATCH, FEATURES), dtype=np.float32)
    y = x.sum(axis=1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def clock() -> tuple[Any, list[float]]:
    import keras

    stamps: list[float] = []

    class Clock(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            stamps.append(time.perf_counter())

    return Clock(), stamps


def steady_ms(stamps: list[float]) -> float:
    steady = stamps[WARM_UP:]
    gaps = [b - a for a, b in zip(steady, steady[1:], strict=False)]
    return 1000 * statistics.median(gaps)


def plain(steps: int) -> float:
    callback, stamps = clock()
    build().fit(
        dataset(steps), epochs=1, shuffle=False, callbacks=[callback], verbose=0
    )
    return steady_ms(stamps)


def with_agent(steps: int, strategy: Any = None) -> float:
    import colab_resume as cr

    callback, stamps = clock()
    with tempfile.TemporaryDirectory() as run_dir:
        agent = cr.Agent(
            run_dir,
            prefer="cpu",
            save_every_steps=10 * steps,  # only the final save, after the window
            save_every_seconds=None,
            strategy=strategy,
        )
        agent.fit(
            build,
            lambda epoch, skip=0: dataset(steps).skip(skip),
            epochs=1,
            steps_per_epoch=steps,
            callbacks=[callback],
            verbose=0,
        )
    return steady_ms(stamps)


def main() -> int:
    args = parse()
    import tensorflow as tf

    pinned = tf.distribute.OneDeviceStrategy("/cpu:0")
    contenders = {
        "plain `fit`": lambda: plain(args.steps),
        "agent, default strategy (now)": lambda: with_agent(args.steps),
        "agent, OneDeviceStrategy (before)": lambda: with_agent(args.steps, pinned),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(args.rounds):
        for name, run in contenders.items():
            times[name].append(run())
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    base = statistics.median(times["plain `fit`"])
    print(f"\nsteady step, median of {args.rounds} rounds of {args.steps} steps")
    print("| contender | ms a step (min-max) | / plain fit |")
    print("|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:.3f} ({min(values):.3f}-{max(values):.3f}) "
            f"| {median / base:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

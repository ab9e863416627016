"""Does a displayed panel slow training? Steps/s with and without, side by side.

The same small Keras ``fit`` through the agent (CPU), alternating runs
without and with a panel that refreshes from the training loop (the
agent's once-a-second tick, as in a notebook: outside a kernel the panel
would stay inert, so the bench registers its refresh by hand). Speed is
measured between the 50th and the last step of each run, so start-up and
the final checkpoint are not counted.

Run: ``python bench/bench_panel.py [--steps 1500] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import colab_resume as cr  # noqa: E402

X = np.random.RandomState(0).randn(4096, 32).astype("float32")
Y = X.sum(axis=1, keepdims=True)


def build_model() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def make_dataset(epoch: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(32).take(100_000)


class Clock(keras.callbacks.Callback):
    def __init__(self, warmup: int) -> None:
        super().__init__()
        self.warmup, self.seen, self.start, self.end = warmup, 0, 0.0, 0.0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.warmup:
            self.start = time.perf_counter()
        self.end = time.perf_counter()


REFRESH_SECONDS: list[float] = []


def one_run(steps: int, with_panel: bool) -> tuple[float, int]:
    agent = cr.Agent(
        tempfile.mkdtemp(),
        save_every_steps=10**9,
        save_every_seconds=None,
        prefer="cpu",
    )
    ticks = 0
    if with_panel:
        panel = agent.panel()
        agent._loop.progress.listeners[:] = []  # internal: the panel's own refresh

        def timed_refresh() -> None:
            started = time.perf_counter()
            panel.refresh()
            REFRESH_SECONDS.append(time.perf_counter() - started)

        agent.on_progress(timed_refresh)
    clock = Clock(warmup=50)
    agent.fit(
        build_model,
        make_dataset,
        epochs=1,
        steps_per_epoch=steps,
        callbacks=[clock],
        verbose=0,
    )
    ticks = agent._loop.progress.due_ticks  # internal: the tick's count
    return (clock.seen - clock.warmup) / (clock.end - clock.start), ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    one_run(200, False)  # warm TensorFlow up
    rates: dict[bool, list[float]] = {False: [], True: []}
    refreshes = 0
    for _ in range(args.rounds):
        for with_panel in (False, True):
            rate, ticks = one_run(args.steps, with_panel)
            rates[with_panel].append(rate)
            refreshes += ticks if with_panel else 0
    without, with_ = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"steps per run: {args.steps}, rounds: {args.rounds} (median of each)")
    print(f"without panel: {without:8.1f} steps/s  {[round(r) for r in rates[False]]}")
    print(f"with panel:    {with_:8.1f} steps/s  {[round(r) for r in rates[True]]}")
    print(f"panel refreshes (due ticks) in the panel runs: {refreshes}")
    cost = statistics.mean(REFRESH_SECONDS)
    print(
        f"one refresh: {cost * 1e3:.2f} ms, once a second: {cost:.2%} of training "
        f"time ({len(REFRESH_SECONDS)} refreshes measured)"
    )
    print(f"ratio with/without: {with_ / without:.3f} ({(with_ / without - 1):+.1%})")


if __name__ == "__main__":
    main()

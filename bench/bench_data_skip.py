"""What the data costs under the agent: repositioning on resume, rebuilding per epoch.

    python bench/bench_data_skip.py [--batches 400] [--resume-at 300]
        [--rebuild-examples 10000] [--rebuild-epochs 2] [--repeats 1]

Rebuilding (second table): the agent calls ``make_dataset(epoch)`` every
epoch. With a NumPy array used inside ``Dataset.map`` (``tf.gather(x, i)``)
every call embeds the array in a new graph; with the array made a tensor
once, outside ``make_dataset``, nothing is copied. Each pattern trains the
same model under plain Keras ``fit`` (one dataset, iterated per epoch) and
under ``Agent.fit`` (local run directory, no periodic saves), interleaved;
the table gives whole-run times, the ratio agent / plain and the peak
extra memory. ``--rebuild-examples 60000`` is MNIST's size (784 features).

Repositioning (first table):

The agent restores the data position by rebuilding the epoch's dataset and
skipping the batches already trained. ``Dataset.skip`` still computes every
skipped element, so where the skip sits in the pipeline decides the cost:

- end: ``make_dataset(epoch)`` returns the full pipeline (expensive map
  included) and the agent skips at its end;
- index-first: ``make_dataset(epoch, skip=n)`` skips the cheap index
  batches before the expensive map.

Both produce the same batches (checked). Prints a markdown table with the
time to the first batch after the skip, for each, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--resume-at", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rebuild-examples", type=int, default=10_000)
    parser.add_argument("--rebuild-epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    skip_table(args)
    rebuild_table(args)


def skip_table(args: argparse.Namespace) -> None:

    import numpy as np
    import tensorflow as tf

    from colab_resume.agent.epochs import epoch_dataset

    examples = args.batches * args.batch_size

    def expensive(indices: tf.Tensor) -> tf.Tensor:
        # Stands in for decoding and augmenting images: real work per batch.
        images = tf.random.stateless_normal(
            [args.batch_size, 64, 64, 3], seed=tf.stack([indices[0], 0])
        )
        for _ in range(4):
            images = tf.nn.avg_pool2d(images, 3, 1, "SAME") * 1.01
        return images

    def end_skip(epoch: int) -> tf.data.Dataset:
        ds = tf.data.Dataset.range(examples).shuffle(examples, seed=epoch)
        return ds.batch(args.batch_size, drop_remainder=True).map(expensive)

    def index_first(epoch: int, skip: int = 0) -> tf.data.Dataset:
        ds = tf.data.Dataset.range(examples).shuffle(examples, seed=epoch)
        ds = ds.batch(args.batch_size, drop_remainder=True).skip(skip)
        return ds.map(expensive)

    def first_batch(make_dataset) -> tuple[float, np.ndarray]:
        started = time.perf_counter()
        ds = epoch_dataset(
            make_dataset, 0, skip=args.resume_at, steps_per_epoch=args.batches
        )
        batch = next(iter(ds)).numpy()
        return time.perf_counter() - started, batch

    first_batch(index_first)  # warm up TF
    end_seconds, end_batch = first_batch(end_skip)
    index_seconds, index_batch = first_batch(index_first)
    assert np.array_equal(end_batch, index_batch), "the two pipelines differ"
    print(f"resume at batch {args.resume_at} of {args.batches}:\n")
    print("| pipeline | time to first batch after resume | ratio |")
    print("|---|---|---|")
    print(f"| agent skips at the end | {end_seconds:.3f} s | 1.00 |")
    print(
        f"| index-first (`make_dataset(epoch, skip)`) | {index_seconds:.3f} s | "
        f"{index_seconds / end_seconds:.3f} |"
    )
    print(
        f"\ncommand: python bench/bench_data_skip.py --batches {args.batches} "
        f"--resume-at {args.resume_at}"
    )


def rebuild_table(args: argparse.Namespace) -> None:
    import functools
    import statistics
    import tempfile
    import threading

    import keras
    import numpy as np
    import psutil
    import tensorflow as tf

    import colab_resume as cr

    n, batch, epochs = args.rebuild_examples, 1024, args.rebuild_epochs
    steps = n // batch
    rng = np.random.RandomState(0)
    x = rng.rand(n, 784).astype("float32")
    y = rng.randint(0, 10, n).astype("int64")
    xt, yt = tf.constant(x), tf.constant(y)

    def numpy_in_map(epoch: int, skip: int = 0) -> tf.data.Dataset:
        ds = tf.data.Dataset.range(n).shuffle(n, seed=epoch)
        ds = ds.batch(batch, drop_remainder=True).skip(skip)
        return ds.map(lambda i: (tf.gather(x, i), tf.gather(y, i)))

    def tensors_once(epoch: int, skip: int = 0) -> tf.data.Dataset:
        ds = tf.data.Dataset.range(n).shuffle(n, seed=epoch)
        ds = ds.batch(batch, drop_remainder=True).skip(skip)
        return ds.map(lambda i: (tf.gather(xt, i), tf.gather(yt, i)))

    def build_model() -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input((784,)),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer="adam",
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        return model

    def measured(run) -> tuple[float, float]:
        proc, peak, stop = psutil.Process(), [0], threading.Event()
        base = proc.memory_info().rss

        def sample() -> None:
            while not stop.wait(0.05):
                peak[0] = max(peak[0], proc.memory_info().rss - base)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        run()
        seconds = time.perf_counter() - started
        stop.set()
        sampler.join()
        return seconds, peak[0] / 1e9

    def plain(make) -> None:
        build_model().fit(make(0), epochs=epochs, steps_per_epoch=steps, verbose=0)

    def agent(make) -> None:
        with tempfile.TemporaryDirectory() as run_dir:
            with cr.Agent(run_dir, save_every_steps=None, prefer="cpu") as a:
                a.fit(
                    build_model, make, epochs=epochs, steps_per_epoch=steps, verbose=0
                )

    plain(tensors_once)  # warm up TensorFlow
    patterns = {
        "NumPy array inside map": numpy_in_map,
        "tensors made once": tensors_once,
    }
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.repeats):
        for name, make in patterns.items():
            for how, run in (("plain", plain), ("agent", agent)):
                figures = measured(functools.partial(run, make))
                times.setdefault((name, how), []).append(figures)
    print(
        f"\nper-epoch rebuild: {n} x 784 float32 ({x.nbytes / 1e6:.0f} MB), "
        f"{epochs} epochs of {steps} steps, {args.repeats} interleaved repeat(s), "
        f"medians:\n"
    )
    print(
        "| pattern | plain fit | Agent.fit | agent / plain "
        "| peak extra memory (agent) |"
    )
    print("|---|---|---|---|---|")
    for name in patterns:
        p = statistics.median(t for t, _ in times[(name, "plain")])
        a = statistics.median(t for t, _ in times[(name, "agent")])
        mem = max(m for _, m in times[(name, "agent")])
        print(f"| {name} | {p:.1f} s | {a:.1f} s | **{a / p:.2f}** | {mem:.1f} GB |")
    print(
        f"\ncommand: python bench/bench_data_skip.py --rebuild-examples {n} "
        f"--rebuild-epochs {epochs} --repeats {args.repeats}"
    )


if __name__ == "__main__":
    main()

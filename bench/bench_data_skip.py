"""What repositioning the data costs on resume: skip at the end vs index-first.

    python bench/bench_data_skip.py [--batches 400] [--resume-at 300]

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
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from colab_resume.data import epoch_dataset

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


if __name__ == "__main__":
    main()

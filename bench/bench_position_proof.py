"""What the position proof costs: one batch hashed per save, a reference per step.

    python bench/bench_position_proof.py [--repeats 20] [--steps 20000]

Every checkpoint taken mid-epoch carries the fingerprint of the batch the
run trains next (colab_resume/agent/trail.py): a save hashes that one batch.
Between saves the trail only keeps references to the batches it hands on
(and draws one ahead). Prints two markdown tables: the hash of one batch,
for batches of a few common shapes (median of ``--repeats``), and the
trail's cost per step, a generator of ``--steps`` small batches read
through it and directly, side by side in this process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SHAPES = {
    "tokens 32 x 1024 int32": ((32, 1024), "int32"),
    "MNIST 256 x 784 float32": ((256, 784), "float32"),
    "images 32 x 224 x 224 x 3 uint8": ((32, 224, 224, 3), "uint8"),
    "images 32 x 224 x 224 x 3 float32": ((32, 224, 224, 3), "float32"),
    "images 128 x 224 x 224 x 3 float32": ((128, 224, 224, 3), "float32"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    hash_table(args.repeats)
    trail_table(args.steps)


def hash_table(repeats: int) -> None:
    import numpy as np

    from colab_resume.agent.fingerprints import batch_hash

    print("| batch (x, and labels of 1 int32 each) | MB | hash per save (ms) | GB/s |")
    print("|---|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for name, (shape, dtype) in SHAPES.items():
        x = (rng.random(shape) * 255).astype(dtype)
        batch = (x, np.arange(shape[0], dtype="int32"))
        batch_hash(batch)  # imports, first touch of the pages
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            batch_hash(batch)
            times.append(time.perf_counter() - began)
        seconds = statistics.median(times)
        size = x.nbytes + batch[1].nbytes
        print(
            f"| {name} | {size / 1e6:.1f} | {seconds * 1e3:.2f} "
            f"| {size / seconds / 1e9:.2f} |"
        )


def trail_table(steps: int) -> None:
    import numpy as np

    from colab_resume.agent.trail import BatchTrail

    batch = (np.zeros((32, 8), "float32"), np.zeros((32, 1), "float32"))

    def source():  # type: ignore[no-untyped-def]
        for _ in range(steps):
            yield batch

    def read(batches) -> float:  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        for _ in batches:
            pass
        return time.perf_counter() - began

    direct = min(read(source()) for _ in range(3))
    trailed = min(read(BatchTrail().follow(source(), 0, 0)) for _ in range(3))
    print()
    print("| batches read | direct (µs/step) | through the trail (µs/step) |")
    print("|---:|---:|---:|")
    print(f"| {steps} | {direct / steps * 1e6:.2f} | {trailed / steps * 1e6:.2f} |")


if __name__ == "__main__":
    main()

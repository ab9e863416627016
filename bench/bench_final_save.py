"""How long the final save of a preempted run takes: notice to committed.

Not a test. A spot VM has about 30 s between the preemption notice and
power-off; this measures what a SIGTERM (or a metadata notice) costs
before the process can exit 143: ``save()`` of the state plus waiting for
its upload and commit, for a state of ``--mb`` MiB of float32 variables
(4 MiB each, like the layers of a mid-sized model), to local disk and to
a local GCS emulator (fake-gcs-server).

    python bench/bench_final_save.py [--mb 400] [--repeats 3]

Prints one markdown row per destination: median, min and max seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


# The GCS emulator, loaded as bench_checkpoint.py loads it (one copy).
from bench_checkpoint import _load_emulator  # noqa: E402


def final_saves(storage, state, repeats: int, work: str) -> list[float]:
    """Seconds from save() to its committed manifest, ``repeats`` times."""
    from colab_resume.checkpoint import CheckpointManager
    from colab_resume.events import EventLog

    manager = CheckpointManager(
        storage,
        lease=1,
        fence=lambda: None,
        events=EventLog(),
        keep=1,
        staging_dir=os.path.join(work, "staging"),
    )
    try:
        manager.save(state, step=0, epoch=0)  # warm-up: first allocation, threads
        manager.wait()
        manager.check()
        times = []
        for step in range(1, repeats + 1):
            started = time.perf_counter()
            manager.save(state, step=step, epoch=0)
            manager.wait()
            manager.check()
            times.append(time.perf_counter() - started)
        return times
    finally:
        manager.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import tensorflow as tf

    from colab_resume.storage import Storage

    rng = tf.random.Generator.from_seed(1)
    state = {"v": [tf.Variable(rng.normal([1024, 1024])) for _ in range(args.mb // 4)]}
    work = tempfile.mkdtemp(prefix="bench-final-")
    emulator = _load_emulator()()
    try:
        emulator.create_bucket("final-save")
        destinations = {
            "local disk": Storage(os.path.join(work, "run")),
            "GCS emulator": Storage(
                "gs://final-save/run",
                {"token": "anon", "endpoint_url": emulator.url},
            ),
        }
        print(
            f"final save of {args.mb} MiB, {args.repeats} repeats, "
            f"{os.cpu_count()} CPUs"
        )
        print("| destination | median s | min s | max s |")
        print("|---|---|---|---|")
        for name, storage in destinations.items():
            times = final_saves(storage, state, args.repeats, work)
            print(
                f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} "
                f"| {max(times):.2f} |",
                flush=True,
            )
    finally:
        emulator.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

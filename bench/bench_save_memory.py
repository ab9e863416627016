"""Peak extra host memory of a checkpoint save, as a ratio of the state's size.

Not a test: it prints a markdown table measured in one run against a local
GCS emulator (fake-gcs-server), or with ``--store local`` a run directory on
local disk (the emulator holds every object in its memory: a 4 GB state's
objects do not fit beside the process on a 24 GB machine).

    python bench/bench_save_memory.py [--sizes-mb 100 1600 4000] [--repeats 3]
        [--store gcs|local]

Each measured save runs in a fresh process, with an emulator of its own (so
no earlier save's freed memory, which the allocator keeps, hides its peak).
There, after two warm-up saves, the kernel's RSS high-water mark is reset
(``/proc/self/clear_refs``), a save starts, and every variable is then
updated at once, as a training step does: on the CPU that makes TensorFlow
copy each variable the snapshot still holds. Two cases: the upload thread
held until every variable is updated (the worst case: the whole snapshot
alive), and left to run as the agent runs it (it writes and releases shards
while the variables are being updated). Once the commit is done, the
process's ``VmHWM`` minus its RSS before the save is the peak extra memory;
``tracemalloc`` gives the part Python and NumPy allocated.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


# The GCS emulator, loaded as bench_checkpoint.py loads it (one copy).
from bench_checkpoint import _load_emulator  # noqa: E402

WHEN = {
    "held": "held until every variable is updated (worst case)",
    "free": "runs as soon as the save returns",
}


def status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_high_water() -> None:
    # "5" resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


LOCAL = "local"  # the child's URL argument for a run directory on local disk


def child(url: str, bucket: str, mb: int, held: bool) -> dict:
    """One measured save (after two warm-up saves) in this fresh process."""
    import gc
    import threading
    import tracemalloc

    import tensorflow as tf

    from colab_resume.checkpoint import CheckpointManager
    from colab_resume.checkpoint.formats.portable import ArrayState

    updated = threading.Event()
    if held:
        # The worst case: the upload thread starts writing only once training
        # has updated every variable, so the whole snapshot is held.
        sync = ArrayState.sync

        def held_sync(self):
            updated.wait()
            sync(self)

        ArrayState.sync = held_sync
    from colab_resume.events import EventLog
    from colab_resume.storage import Storage

    work = tempfile.mkdtemp(prefix="bench-mem-")
    if url == LOCAL:
        storage = Storage(os.path.join(work, "run"))
    else:
        storage = Storage(f"gs://{bucket}/ours", {"token": "anon", "endpoint_url": url})
    count = max(1, mb // 4)  # 4 MiB float32 variables, like a mid-sized model's
    state = {"v": [tf.Variable(tf.fill([1024, 1024], float(i))) for i in range(count)]}
    nbytes = sum(int(v.numpy().nbytes) for v in state["v"])
    manager = CheckpointManager(
        storage,
        lease=1,
        fence=lambda: None,
        events=EventLog(),
        keep=1,
        staging_dir=os.path.join(work, "staging"),
    )
    step = 0
    updated.set()
    for _ in range(2):  # warm-up: the traced reader, first allocations
        step += 1
        manager.save(state, step=step, epoch=0)
        manager.wait()
        manager.check()
    one = tf.ones([1024, 1024])
    gc.collect()
    reset_high_water()
    base = status_kb("VmRSS")
    tracemalloc.start()
    updated.clear()
    manager.save(state, step=step + 1, epoch=0)
    for v in state["v"]:  # a training step: every variable updated
        v.assign_add(one)
    updated.set()
    manager.wait()
    manager.check()
    _, python = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    extra = status_kb("VmHWM") - base
    manager.close()
    shutil.rmtree(work, ignore_errors=True)
    return {"mb": mb, "bytes": nbytes, "extra": extra, "python": python}


def _measure(store: str, mb: int, mode: str, repeat: int) -> dict:
    """One child process's measured save of an ``mb`` MB state.

    Each gets an emulator of its own: after some ten 1.6 GB runs one
    emulator, holding objects in its memory, began failing uploads.
    """
    bucket = f"mem-{mb}-{mode}-{repeat}-{os.getpid()}"
    emulator = _load_emulator()() if store == "gcs" else None
    print(f"[memory] {mb} MB, {mode}, run {repeat + 1}", file=sys.stderr)
    try:
        if emulator is not None:
            emulator.create_bucket(bucket)
        out = subprocess.run(
            [sys.executable, __file__, "--child"]
            + [emulator.url if emulator else LOCAL, bucket, str(mb), mode],
            capture_output=True,
            text=True,
        )
    finally:
        if emulator is not None:
            emulator.stop()
    if out.returncode:
        raise SystemExit(f"the {mb} MB run failed:\n{out.stderr[-3000:]}")
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result: dict = json.loads(line.removeprefix("RESULT "))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[100, 1600])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--store",
        choices=("gcs", "local"),
        default="gcs",
        help="the GCS emulator, or a run directory on local disk (states the "
        "emulator cannot hold in this machine's memory beside the process)",
    )
    parser.add_argument("--child", nargs=4, metavar=("URL", "BUCKET", "MB", "HELD"))
    args = parser.parse_args()
    if args.child:
        url, bucket, mb, held = args.child
        result = child(url, bucket, int(mb), held == "held")
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
        return
    results = []
    for mb, mode in [(mb, m) for mb in args.sizes_mb for m in ("held", "free")]:
        # One measured save per fresh process: within one process the
        # allocator keeps what an earlier save freed, and a later save
        # reuses it without raising the high-water mark.
        runs = [
            _measure(args.store, mb, mode, repeat) for repeat in range(args.repeats)
        ]
        extra = [r["extra"] for r in runs]
        results.append(
            runs[0]
            | {
                "mode": mode,
                "extra": statistics.median(extra),
                "extra_range": [min(extra), max(extra)],
                "python": statistics.median(r["python"] for r in runs),
            }
        )
    command = "python bench/bench_save_memory.py " + " ".join(sys.argv[1:])
    lines = [
        f"`{command.strip()}`",
        "",
        "| state | upload thread | peak extra host memory (min-max) "
        "| ratio to the state | of it Python/NumPy allocations |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        low, high = r["extra_range"]
        lines.append(
            f"| {r['bytes'] / 1e9:.2f} GB | {WHEN[r['mode']]} "
            f"| {r['extra'] / 1e9:.2f} GB "
            f"({low / 1e9:.2f}-{high / 1e9:.2f}) "
            f"| **{r['extra'] / r['bytes']:.2f}x** | {r['python'] / 1e6:.0f} MB |"
        )
    lines.append("")
    lines.append(
        "Median of the repeats; every variable updated right after the save "
        "starts, as a training step does."
    )
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

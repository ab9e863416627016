"""Checkpoint benchmark: colab_resume vs plain TensorFlow + gcsfs, side by side.

Not a test: it prints a markdown table of ratios measured in one run
against a local GCS emulator (fake-gcs-server).

    python bench/bench_checkpoint.py [--sizes-mb 100 400] [--repeats 7]

Columns (medians of repeats; ours and its baseline interleaved):
  blocking   time save() blocks training / TensorFlow's own async write of
             the same variables (goal <= 1x) / a synchronous
             tf.train.CheckpointManager.save
  upload     our upload throughput (stage sync + CRC32C + parallel put +
             manifest) / a raw gcsfs put of the same files (goal >= 90%)
  restore    our restore (list, verify, parallel get with CRC32C computed as
             it streams, safetensors read) / raw gcsfs get + TF read of
             TensorFlow's own checkpoint of the same variables (goal <= 110%),
             and where our time went
  peak mem   extra host RSS during a save and its upload
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def _load_emulator():
    path = os.path.join(ROOT, "tests", "support", "emulator.py")
    spec = importlib.util.spec_from_file_location("_bench_emulator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Emulator


class PeakRSS:
    """Samples this process's RSS on a thread; ``peak`` minus ``base`` is extra."""

    def __init__(self) -> None:
        import psutil

        self._proc = psutil.Process()
        self.base = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak - self.base


def make_state(tf, mb: int, seed: int) -> dict:
    # 4 MiB float32 variables, like the layers of a mid-sized model.
    count = max(1, mb // 4)
    rng = tf.random.Generator.from_seed(seed)
    return {
        "v": [tf.Variable(rng.normal([1024, 1024])) for _ in range(count)],
    }


def bench_size(tf, emulator, mb: int, repeats: int) -> dict:
    from colab_resume.checkpoint import CheckpointManager
    from colab_resume.events import EventLog
    from colab_resume.storage import Storage

    bucket = f"bench-{mb}-{os.getpid()}"
    emulator.create_bucket(bucket)
    options = {"token": "anon", "endpoint_url": emulator.url}
    storage = Storage(f"gs://{bucket}/ours", options)
    work = tempfile.mkdtemp(prefix="bench-ckpt-")
    state = make_state(tf, mb, seed=1)
    result: dict = {"mb": mb}

    # Plain TF: synchronous CheckpointManager save to local disk.
    baseline = tf.train.CheckpointManager(
        tf.train.Checkpoint(**state), os.path.join(work, "tf"), max_to_keep=1
    )
    baseline.save()  # warm-up (tracing, first allocation)
    tf_times = []
    for _ in range(repeats):
        started = time.perf_counter()
        path = baseline.save()
        tf_times.append(time.perf_counter() - started)
    result["tf_save"] = statistics.median(tf_times)

    # Ours (the whole save() call: what training waits for) and TensorFlow's
    # own async save of the same variables, interleaved; upload, peak memory.
    events = EventLog()
    manager = CheckpointManager(
        storage,
        lease=1,
        fence=lambda: None,
        events=events,
        keep=1,
        staging_dir=os.path.join(work, "staging"),
    )
    manager.save(state, step=0, epoch=0)  # warm-up
    manager.wait()
    manager.check()
    tf_async = tf.train.Checkpoint(**state)
    async_options = tf.train.CheckpointOptions(
        experimental_enable_async_checkpoint=True
    )
    tf_async.write(os.path.join(work, "async", "w"), options=async_options)
    tf_async.sync()  # warm-up
    blocking, upload, async_block = [], [], []
    peak = 0
    for step in range(1, repeats + 1):
        started = time.perf_counter()
        tf_async.write(os.path.join(work, "async", f"s{step}"), options=async_options)
        async_block.append(time.perf_counter() - started)
        tf_async.sync()
        rss = PeakRSS()
        started = time.perf_counter()
        manager.save(state, step=step, epoch=0)
        blocking.append(time.perf_counter() - started)
        manager.wait()
        peak = max(peak, rss.stop())
        manager.check()
        upload.append(events.recent(kind="checkpoint.committed")[-1].data["seconds"])
    result["our_block"] = statistics.median(blocking)
    result["tf_async_block"] = statistics.median(async_block)
    result["our_upload"] = statistics.median(upload)
    result["peak_mb"] = peak / 1e6

    # Raw gcsfs put of the same TF files (parallel, as gcsfs batches them).
    files = [
        os.path.join(os.path.dirname(path), f)
        for f in os.listdir(os.path.dirname(path))
        if f.startswith(os.path.basename(path) + ".")
    ]
    nbytes = sum(os.path.getsize(f) for f in files)
    result["bytes"] = nbytes
    fs = storage.fs
    raw_put = []
    for attempt in range(repeats):
        remote = [f"{bucket}/raw/{attempt}/{os.path.basename(f)}" for f in files]
        started = time.perf_counter()
        fs.put(files, remote)
        raw_put.append(time.perf_counter() - started)
    result["raw_put"] = statistics.median(raw_put)

    # Restore: ours vs raw gcsfs get + TF read, interleaved pair by pair so
    # that noise from other work on the machine hits both alike.
    fresh = make_state(tf, mb, seed=2)
    reader = tf.train.Checkpoint(**fresh)
    remote = [f"{bucket}/raw/0/{os.path.basename(f)}" for f in files]
    ours_restore, raw_restore, phases = [], [], []
    for _ in range(repeats):
        started = time.perf_counter()
        info = manager.restore(fresh)
        ours_restore.append(time.perf_counter() - started)
        phases.append(info.seconds)
        local = tempfile.mkdtemp(dir=work)
        started = time.perf_counter()
        fs.get(remote, [os.path.join(local, os.path.basename(f)) for f in files])
        reader.read(os.path.join(local, os.path.basename(path))).expect_partial()
        raw_restore.append(time.perf_counter() - started)
        shutil.rmtree(local)
    result["our_restore"] = statistics.median(ours_restore)
    result["raw_restore"] = statistics.median(raw_restore)
    result["restore_ratios"] = sorted(
        a / b for a, b in zip(ours_restore, raw_restore, strict=True)
    )
    result["restore_phases"] = {
        phase: statistics.median(p.get(phase, 0.0) for p in phases)
        for phase in ("list", "verify", "download", "read")
    }
    same = all(
        bool(tf.reduce_all(a == b)) for a, b in zip(state["v"], fresh["v"], strict=True)
    )
    result["restored_equal"] = same
    manager.close()
    shutil.rmtree(work, ignore_errors=True)
    return result


def table(results: list[dict], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| variables | blocking: ours / TF async save / TF sync save "
        "| upload: ours / raw gcsfs put "
        "| restore: ours / raw get + TF read (pairs: min-max) "
        "| restore phases: list, verify, download, read | peak extra host memory |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        ratios = r["restore_ratios"]
        ph = r["restore_phases"]
        lines.append(
            f"| {r['bytes'] / 1e6:.0f} MB "
            f"| {r['our_block'] * 1e3:.1f} / {r['tf_async_block'] * 1e3:.1f} / "
            f"{r['tf_save'] * 1e3:.0f} ms: "
            f"**{r['our_block'] / r['tf_async_block']:.2f}x** TF async "
            f"| {r['bytes'] / r['our_upload'] / 1e6:.0f} / "
            f"{r['bytes'] / r['raw_put'] / 1e6:.0f} MB/s = "
            f"**{r['raw_put'] / r['our_upload']:.0%}** "
            f"| {r['our_restore']:.2f} s / {r['raw_restore']:.2f} s = "
            f"**{r['our_restore'] / r['raw_restore']:.0%}** "
            f"({ratios[0]:.0%}-{ratios[-1]:.0%}) "
            f"| {ph['list'] * 1e3:.0f}, {ph['verify'] * 1e3:.0f}, "
            f"{ph['download'] * 1e3:.0f}, {ph['read'] * 1e3:.0f} ms "
            f"| {r['peak_mb']:.0f} MB |"
        )
    lines.append("")
    lines.append(
        "Medians of interleaved repeats; the restore ratio is of the medians, "
        "with the range of the per-pair ratios."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[100])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    import tensorflow as tf

    emulator = _load_emulator()()
    try:
        results = [bench_size(tf, emulator, mb, args.repeats) for mb in args.sizes_mb]
    finally:
        emulator.stop()
    for r in results:
        if not r["restored_equal"]:
            raise SystemExit(f"restore of {r['mb']} MB did not reproduce the values")
    command = "python bench/bench_checkpoint.py " + " ".join(sys.argv[1:])
    sys.stdout.write(table(results, command.strip()) + "\n")


if __name__ == "__main__":
    main()

"""Parallel transfers against one stream, through a slow, far link.

Not a test: it prints a markdown table of throughputs measured side by side
in one run. Each store's emulator (fake-gcs-server, the Drive API emulator)
sits behind ``bench/throttle.py``, which caps every connection at
``--mbps`` MB/s per direction and adds ``--latency-ms`` to every request's
turnaround, as a far service does. A checkpoint's files (``--files`` of
``--file-mb`` MB each, as the shards of a frozen base are) are uploaded with
the checkpoint's own upload (``checkpoint/transfer.py``) and downloaded
with the restore's own download (``checkpoint/fetch.py``, size and CRC32C
checked as each file streams in), once with one transfer at a time and
once with as many as the store's ``transfer_streams`` (what a checkpoint
uses: 16 on GCS, 8 on Drive) or ``--workers``; the two are interleaved,
repeated, and the medians reported.

    python bench/bench_transfers.py [--mbps 2.5] [--latency-ms 100]
        [--files 8] [--file-mb 4] [--workers N] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the emulators' starters
sys.path.insert(0, HERE)

from throttle import Throttle  # noqa: E402

from colab_resume.checkpoint import transfer  # noqa: E402
from colab_resume.checkpoint.fetch import ShardFetch  # noqa: E402
from colab_resume.checkpoint.manager import staging_bytes  # noqa: E402
from colab_resume.events import EventLog  # noqa: E402
from colab_resume.protocol.listing import RunListing  # noqa: E402
from colab_resume.protocol.manifest import FileEntry, Manifest, crc32c_file  # noqa: E402
from colab_resume.protocol.rundir import CheckpointName  # noqa: E402
from colab_resume.storage import Storage  # noqa: E402


def make_files(directory: str, count: int, size: int) -> list[str]:
    paths = []
    for i in range(count):
        path = os.path.join(directory, f"ckpt.{i:05d}-of-{count:05d}.bin")
        with open(path, "wb") as handle:
            handle.write(os.urandom(size))
        paths.append(path)
    return paths


def upload(storage: Storage, paths: list[str], name: CheckpointName, workers: int):
    pairs = [(p, f"{name.path}/{os.path.basename(p)}") for p in paths]
    started = time.perf_counter()
    # The memory a save gives its uploads (checkpoint/manager.py).
    total = sum(os.path.getsize(p) for p in paths)
    transfer.upload(storage, pairs, workers=workers, memory_bytes=staging_bytes(total))
    return time.perf_counter() - started


def download(storage: Storage, manifest: Manifest, workers: int, scratch: str):
    name = CheckpointName(step=manifest.step, lease=manifest.lease)
    (entry,) = [d for d in RunListing.read(storage).checkpoints if d.name == name]
    directory = tempfile.mkdtemp(dir=scratch)
    started = time.perf_counter()
    fetch = ShardFetch(
        storage,
        entry,
        manifest,
        directory,
        events=EventLog(),
        workers=workers,
        progress_seconds=1e9,
    )
    try:
        for item in manifest.files:
            fetch.arrived(item.name)
        return time.perf_counter() - started
    finally:
        fetch.close()


def bench_store(label, url, options, args, scratch) -> tuple[int, dict]:
    size = int(args.file_mb * 1e6)
    total = size * args.files
    results: dict[str, dict[int, list[float]]] = {"up": {}, "down": {}}
    step = 0
    streams = args.workers or Storage(url, options).store.transfer_streams
    for _ in range(args.repeats):
        for workers in (1, streams):
            step += 1
            storage = Storage(url, options)
            name = CheckpointName(step=step, lease=1)
            local = tempfile.mkdtemp(dir=scratch)
            paths = make_files(local, args.files, size)
            entries = tuple(
                FileEntry(name=os.path.basename(p), size=size, crc32c=crc32c_file(p))
                for p in paths
            )
            seconds = upload(storage, paths, name, workers)
            results["up"].setdefault(workers, []).append(total / seconds)
            manifest = Manifest(
                step=step,
                epoch=0,
                lease=1,
                wall_time=time.time(),
                files=entries,
                state_format="portable",
            )
            storage.write_json(name.manifest_path, manifest.to_json())
            seconds = download(storage, manifest, workers, scratch)
            results["down"].setdefault(workers, []).append(total / seconds)
            print(f"{label}: {step} transfers of {workers} at a time done", flush=True)
    return streams, {
        way: {w: statistics.median(v) for w, v in by.items()}
        for way, by in results.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mbps", type=float, default=2.5)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--file-mb", type=float, default=4.0)
    parser.add_argument("--workers", type=int, help="default: the store's own")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from support.drive_emulator import DriveEmulator
    from support.emulator import Emulator

    rate, latency = args.mbps * 1e6, args.latency_ms / 1e3
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-transfers-") as scratch:
        gcs = Emulator()
        drive = DriveEmulator()
        try:
            gcs.create_bucket("transfers")
            with Throttle(gcs.url, bytes_per_s=rate, latency_s=latency) as slow:
                options = {"token": "anon", "endpoint_url": slow.url}
                found = bench_store("GCS", "gs://transfers/run", options, args, scratch)
                rows.append(("GCS emulator", found, slow.connections))
            with Throttle(drive.url, bytes_per_s=rate, latency_s=latency) as slow:
                options = drive.options(slow.url)
                found = bench_store(
                    "Drive", "gdrive://bench/transfers", options, args, scratch
                )
                rows.append(("Drive emulator", found, slow.connections))
        finally:
            gcs.stop()
            drive.stop()
    print()
    print(
        f"{args.files} files of {args.file_mb:g} MB; each connection capped at "
        f"{args.mbps:g} MB/s with {args.latency_ms:g} ms per turnaround; medians "
        f"of {args.repeats}"
    )
    print()
    # Uploads run as many at a time as the save's memory allows.
    total = int(args.file_mb * 1e6) * args.files
    print(
        "| store | upload: 1 stream | upload: the store's streams (at a time in "
        "the save's memory) | download: 1 stream | download: the store's streams |"
    )
    print("|---|---|---|---|---|")
    for label, (streams, found), _ in rows:
        up, down = found["up"], found["down"]
        one, many = up[1], up[streams]
        d_one, d_many = down[1], down[streams]
        up_parallel, _ = transfer.upload_plan(staging_bytes(total), streams)
        print(
            f"| {label} | {one / 1e6:.2f} MB/s | {many / 1e6:.2f} MB/s, "
            f"workers={streams} ({up_parallel} at a time) "
            f"(**{many / one:.1f}x**) | {d_one / 1e6:.2f} MB/s | "
            f"{d_many / 1e6:.2f} MB/s, {streams} at a time "
            f"(**{d_many / d_one:.1f}x**) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

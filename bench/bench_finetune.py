"""A fine-tune's checkpoints: what each ``frozen`` mode writes, side by side.

Not a test: it prints a markdown table measured in one run. The model is a
LoRA fine-tune in miniature: ``--layers`` Dense layers of ``--width`` units
whose kernels ``enable_lora(4)`` froze (the base, ``--layers * width^2 *
4`` bytes) and a trained head, Adam, TensorFlow on the CPU. For each store
(local disk, the GCS and Drive emulators) and each mode (``"every"``: this
feature off; ``"once"``; ``"rebuild"``), in a fresh run directory: one
training step and the first save, then ``--saves`` later saves with a step
between, then a restore into a freshly built model. Measured with the
checkpoint manager the agent drives:

- bytes uploaded by the first save and by a later one, against the bytes
  that change (the trainable variables, optimizer slots and counters);
- seconds from the first ``save()`` to its commit;
- a later save's peak extra host memory (RSS sampled every 10 ms from the
  ``save()`` until its commit, above the RSS before it);
- the restore's seconds (list, download, verify, read).

    python bench/bench_finetune.py [--width 1024] [--layers 16] [--saves 3]
        [--stores local gcs drive]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the emulators' starters
sys.path.insert(0, HERE)

from bench_checkpoint import PeakRSS  # noqa: E402

MODES = ("every", "once", "rebuild")


def build(width: int, layers: int):
    import keras

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


def step(model, width: int, seed: int) -> None:
    import numpy as np

    x = np.random.default_rng(seed).standard_normal((8, width)).astype("float32")
    model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0)


def changing_bytes(model) -> int:
    import numpy as np

    variables = [*model.trainable_variables, *model.optimizer.variables]
    return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)


def one(storage_factory, mode: str, args) -> dict:
    from colab_resume.checkpoint import CheckpointManager
    from colab_resume.events import EventLog

    storage = storage_factory()
    events = EventLog()
    model = build(args.width, args.layers)
    step(model, args.width, 0)
    found: dict = {"changing": changing_bytes(model)}
    with tempfile.TemporaryDirectory(prefix="bench-ft-") as staging:
        manager = CheckpointManager(
            storage,
            lease=1,
            fence=lambda: None,
            events=events,
            staging_dir=staging,
            frozen=mode,
            keep=2,
        )
        with manager:
            started = time.perf_counter()
            manager.save(model, step=1, epoch=0)
            manager.wait()
            found["first_s"] = time.perf_counter() - started
            peaks, seconds = [], []
            for later in range(2, 2 + args.saves):
                step(model, args.width, later)
                rss = PeakRSS()
                began = time.perf_counter()
                manager.save(model, step=later, epoch=0)
                manager.wait()
                seconds.append(time.perf_counter() - began)
                peaks.append(rss.stop())
            manager.check()
        commits = events.recent(kind="checkpoint.committed")
        found["first_bytes"] = commits[0].data["uploaded_bytes"]
        found["later_bytes"] = statistics.median(
            c.data["uploaded_bytes"] for c in commits[1:]
        )
        found["later_s"] = statistics.median(seconds)
        found["later_peak"] = statistics.median(peaks)
        fresh = build(args.width, args.layers)
        reader = CheckpointManager(
            storage,
            lease=1,
            fence=lambda: None,
            events=EventLog(),
            staging_dir=staging,
            frozen=mode,
        )
        with reader:
            began = time.perf_counter()
            info = reader.restore(fresh)
            found["restore_s"] = time.perf_counter() - began
        assert info is not None and info.step == 1 + args.saves
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--stores", nargs="+", default=["local", "gcs", "drive"])
    args = parser.parse_args()

    from support.drive_emulator import DriveEmulator
    from support.emulator import Emulator

    from colab_resume.storage import Storage

    base_mb = args.layers * args.width * args.width * 4 / 1e6
    rows = []
    gcs = Emulator() if "gcs" in args.stores else None
    drive = DriveEmulator() if "drive" in args.stores else None
    counter = iter(range(1_000_000))
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ft-runs-") as runs:
            for store in args.stores:
                for mode in MODES:
                    n = next(counter)
                    if store == "local":

                        def factory(n=n):
                            return Storage(os.path.join(runs, f"run-{n}"))
                    elif store == "gcs":
                        assert gcs is not None
                        gcs.create_bucket(f"ft-{n}")
                        opts = {"token": "anon", "endpoint_url": gcs.url}

                        def factory(n=n, opts=opts):
                            return Storage(f"gs://ft-{n}/run", opts)
                    else:
                        assert drive is not None
                        opts = drive.options()

                        def factory(n=n, opts=opts):
                            return Storage(f"gdrive://ft-{n}/run", opts)

                    found = one(factory, mode, args)
                    rows.append((store, mode, found))
                    print(f"{store} {mode}: done", flush=True)
    finally:
        if gcs is not None:
            gcs.stop()
        if drive is not None:
            drive.stop()
    print()
    print(
        f"Frozen base {base_mb:.0f} MB ({args.layers} LoRA Dense layers of "
        f"{args.width}); changing part {rows[0][2]['changing'] / 1e6:.2f} MB; "
        f"medians of {args.saves} later saves"
    )
    print()
    print(
        "| store | frozen= | first save: bytes, s to commit | later save: bytes "
        "(÷ changing) | later save: s | later save: peak extra RSS (÷ changing) "
        "| restore s |"
    )
    print("|---|---|---|---|---|---|---|")
    for store, mode, f in rows:
        ch = f["changing"]
        print(
            f"| {store} | {mode} | {f['first_bytes'] / 1e6:.1f} MB, "
            f"{f['first_s']:.2f} s | {f['later_bytes'] / 1e6:.2f} MB "
            f"({f['later_bytes'] / ch:.2f}x) | {f['later_s']:.2f} | "
            f"{f['later_peak'] / 1e6:.1f} MB ({f['later_peak'] / ch:.1f}x) | "
            f"{f['restore_s']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

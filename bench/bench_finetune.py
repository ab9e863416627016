"""A fine-tune's checkpoints: each ``frozen`` mode and Keras' Orbax callback.

Not a test: it prints markdown tables measured in one run, and the command
that made them. The model (``finetune/model.py``) is a LoRA fine-tune in
miniature: ``--layers`` Dense layers of ``--width`` units whose kernels
``enable_lora(4)`` froze (the base, ``--layers * width^2 * 4`` bytes; 16
layers of 4096 make 1.07 GB) and a trained head, Adam, TensorFlow on the
CPU. The contenders: the checkpoint manager the agent drives with
``frozen="every"`` (this feature off), ``"once"`` and ``"rebuild"``, and
Keras' own ``keras.callbacks.OrbaxCheckpoint`` (``finetune/keras_orbax.py``:
local disk and the GCS emulator; it needs orbax-checkpoint, which pulls in
JAX, so the bench runs in a virtualenv made for it, see
docs/guide/head-to-head.md; without it that contender is left out, saying
so).

Saves, for each store (local disk, the GCS and Drive emulators) and each
contender, in a fresh run directory: one training step and the first save,
then ``--saves`` later saves with a step between, then a restore into a
freshly built model, checked bitwise. Measured:

- bytes written by the first save and by a later one, against the bytes
  that change (the trainable variables, optimizer slots and counters);
- seconds from the first save to its commit;
- a later save's peak extra host memory (RSS sampled every 10 ms from the
  save until its commit, above the RSS before it);
- the restore's seconds, and for the agent where they went: the listing,
  the manifests checked, the download, the read (the read of ``"rebuild"``
  includes the fingerprint check of the base, also timed apart: the
  SHA-256 of the frozen kernels).

Pace (``finetune/pace.py``): the steady step time with a save every
``--save-every`` steps, over plain ``model.fit`` with no checkpoints.

Each measurement runs in a fresh process (this script with ``--child``):
in one process the memory of each freed model stayed with the process
(16 GB at a 1 GB base by the end), and an earlier contender's threads
would run beside a later one. The emulators live in
this process, a run directory of their own for each measurement.

    python bench/bench_finetune.py [--width 1024] [--layers 16] [--saves 3]
        [--stores local gcs drive] [--save-every 10] [--pace-saves 4]
        [--repeats 2] [--no-pace]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the emulators' starters
sys.path.insert(0, HERE)

from bench_checkpoint import PeakRSS  # noqa: E402
from finetune import keras_orbax, pace  # noqa: E402
from finetune.model import (  # noqa: E402
    build,
    changing_bytes,
    frozen_kernels,
    same_state,
    step,
)

MODES = ("every", "once", "rebuild")
# Where a restore's time went (RestoredInfo.seconds); the read of "rebuild"
# includes the fingerprint check.
RESTORE_PARTS = ("list", "verify", "download", "read")


def one(
    url: str, options: dict[str, Any] | None, mode: str, args: Any
) -> dict[str, Any]:
    """The agent's checkpoint manager with ``frozen=mode``: saves and a restore."""
    from colab_resume.checkpoint import CheckpointManager
    from colab_resume.events import EventLog
    from colab_resume.storage import Storage

    storage = Storage(url, options)
    events = EventLog()
    model = build(args.width, args.layers)
    step(model, args.width, 0)
    found: dict[str, Any] = {"changing": changing_bytes(model)}
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
        found["later_bytes"] = [c.data["uploaded_bytes"] for c in commits[1:]]
        found["later_s"] = seconds
        found["later_peak"] = peaks
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
        found["restore_parts"] = info.seconds
        if not same_state(model, fresh):
            raise AssertionError(f"frozen={mode!r} restored another state")
        if mode == "rebuild":
            found["check_s"] = fingerprint_seconds(fresh)
    return found


def fingerprint_seconds(model: Any) -> float:
    """The fingerprint check of a ``"rebuild"`` resume alone: each frozen
    kernel to the host and its SHA-256, as the restore checks them."""
    from colab_resume.protocol.objects import array_digest

    began = time.perf_counter()
    for variable in frozen_kernels(model):
        array_digest(variable.numpy())
    return time.perf_counter() - began


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    args = argparse.Namespace(**spec["args"])
    if spec["emulator"]:
        keras_orbax.use_emulator(spec["emulator"])
    url, options, contender = spec["url"], spec["options"], spec["contender"]
    if spec["part"] == "saves":
        if contender == pace.ORBAX:
            return keras_orbax.measure_saves(url, args)
        return one(url, options, contender, args)
    if contender == "plain":
        return pace.plain(args)
    if contender == pace.ORBAX:
        return pace.orbax(url, args)
    return pace.agent(url, options, contender, args)


def in_child(spec: dict[str, Any]) -> dict[str, Any]:
    """``child(spec)`` in a fresh process; its result."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
    )
    results = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not results:
        raise SystemExit(
            f"{spec['part']} {spec['contender']} on {spec['url']} failed "
            f"({done.returncode}):\n{done.stderr[-4000:]}"
        )
    result: dict[str, Any] = json.loads(results[-1].removeprefix("RESULT "))
    return result


def saves_table(rows: list[tuple[str, str, dict[str, Any]]]) -> str:
    lines = [
        "| store | contender | first save: bytes, s to commit | later save: bytes "
        "(÷ changing) | later save: s | later save: peak extra RSS (÷ changing) "
        f"| restore s ({', '.join(RESTORE_PARTS)}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for store, contender, f in rows:
        ch = f["changing"]
        later = statistics.median(f["later_bytes"])
        peak = statistics.median(f["later_peak"])
        parts = f.get("restore_parts")
        restore = f"{f['restore_s']:.2f}" + (
            " (" + ", ".join(f"{parts.get(p, 0.0):.2f}" for p in RESTORE_PARTS) + ")"
            if parts
            else ""
        )
        lines.append(
            f"| {store} | {pace.LABELS[contender]} | {f['first_bytes'] / 1e6:.1f} MB, "
            f"{f['first_s']:.2f} s | {later / 1e6:.2f} MB ({later / ch:.2f}x) | "
            f"{statistics.median(f['later_s']):.2f} | {peak / 1e6:.1f} MB "
            f"({peak / ch:.2f}x) | {restore} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--stores", nargs="+", default=["local", "gcs", "drive"])
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--pace-saves", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-pace", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child(json.loads(args.child))
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
        return 0
    command = (
        f"python bench/bench_finetune.py --width {args.width} --layers "
        f"{args.layers} --saves {args.saves} --stores {' '.join(args.stores)} "
        + (
            "--no-pace"
            if args.no_pace
            else f"--save-every {args.save_every} --pace-saves {args.pace_saves} "
            f"--repeats {args.repeats}"
        )
    )
    print(command, flush=True)
    started = time.perf_counter()

    from support.drive_emulator import DriveEmulator
    from support.emulator import Emulator

    no_orbax = keras_orbax.unavailable()
    contenders = [*MODES, *([] if no_orbax else [pace.ORBAX])]
    gcs = Emulator() if "gcs" in args.stores else None
    drive = DriveEmulator() if "drive" in args.stores else None
    counter = iter(range(1_000_000))
    shared = {k: v for k, v in vars(args).items() if k != "child"}
    rows: list[tuple[str, str, dict[str, Any]]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ft-runs-") as runs:

            def run(part: str, contender: str, store: str) -> dict[str, Any]:
                """``contender`` measured in a fresh process and run directory."""
                n = next(counter)
                options: dict[str, Any] | None = None
                if store == "local":
                    url = os.path.join(runs, f"run-{n}")
                elif store == "gcs":
                    assert gcs is not None
                    gcs.create_bucket(f"ft-{n}")
                    url = f"gs://ft-{n}/run"
                    options = {"token": "anon", "endpoint_url": gcs.url}
                else:
                    assert drive is not None
                    url, options = f"gdrive://ft-{n}/run", drive.options()
                spec = {
                    "part": part,
                    "contender": contender,
                    "url": url,
                    "options": options,
                    "emulator": gcs.url if gcs is not None else None,
                    "args": shared,
                }
                return in_child(spec)

            for store in args.stores:
                for contender in contenders:
                    if contender == pace.ORBAX and store not in keras_orbax.STORES:
                        continue
                    rows.append((store, contender, run("saves", contender, store)))
                    print(f"saves {store} {contender}: done", flush=True)
            paced = None
            if not args.no_pace:
                paced = pace.measure(
                    lambda c, s: run("pace", c, s), args.stores, contenders, args
                )
    finally:
        if gcs is not None:
            gcs.stop()
        if drive is not None:
            drive.stop()
    base_mb = args.layers * args.width * args.width * 4 / 1e6
    checks = [f["check_s"] for _, c, f in rows if c == "rebuild"]
    print()
    print(command)
    print()
    print(
        f"Frozen base {base_mb:.0f} MB ({args.layers} LoRA Dense layers of "
        f"{args.width}); changing part {rows[0][2]['changing'] / 1e6:.2f} MB; "
        f"medians of {args.saves} later saves. The fingerprint check of a "
        f'"rebuild" resume alone (SHA-256 of the base): '
        f"{statistics.median(checks):.2f} s."
    )
    print()
    print(saves_table(rows))
    if no_orbax is not None:
        print(f"\n{pace.LABELS[pace.ORBAX]}: not measured: {no_orbax}.")
    elif "drive" in args.stores:
        print(
            f"\n{pace.LABELS[pace.ORBAX]}: not on Drive (Orbax reaches it "
            "only through a mount)."
        )
    if paced is not None:
        print()
        print(pace.table(paced, args))
    print(f"\n(the whole command took {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time to the first resumed step, phase by phase, against a raw download.

    python bench/bench_first_step.py [--state-mb 100|400] [--repeats 5]
        [--baseline-src DIR]

A run is seeded with a committed checkpoint of about ``--state-mb`` MB
(a stack of 2048x2048 Dense layers with their Adam slots) on a local GCS
emulator. Then each repeat is a fresh process that does what a rerun of a
notebook does — imports, ``Agent.connect()``, ``Agent.fit`` — and reports
when each phase ended:

- import: ``tensorflow``, ``keras`` and ``colab_resume``;
- connect: ``agent.connect()`` (the accelerator, the strategy);
- take the run: the lease (``takeover=True``: no wait for the previous
  holder, which this benchmark left silent; waits are not measured here);
- build: ``build_model()`` in the fresh strategy scope;
- restore: list, verify, download, read (``RestoredInfo.seconds``);
- reposition: fingerprint check, the epoch's dataset positioned at the
  step, Keras' ``fit`` setting up;
- first step: the first training step (TensorFlow traces it here).

In the same process, order alternating between repeats, two baselines:
a raw ``gcsfs`` get of the same checkpoint files (the bytes any restore
must move) and plain Keras: ``build_model()`` and a one-step ``fit`` with
no agent (what the first step costs anyway). Prints medians (and min-max),
the goal ratio (everything but the imports over the raw download, goal
<= 2x) and what resuming adds to plain Keras' own first step (goal <=
0.2x the raw download).

Each round runs, in turn, the resume with the download overlapping
``build_model()`` (the default), the resume with that prefetch turned off
(the shard reads still overlap the downloads), with ``--baseline-src`` the
resume of another checkout of the package (an earlier version), and plain
Keras: interleaved, so the machine's load hits them alike.
"""

from __future__ import annotations

import argparse
import importlib.util
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# A child resuming with an earlier version imports that checkout instead.
sys.path.insert(0, os.environ.get("BENCH_FIRST_STEP_SRC") or ROOT)

FEATURES = 2048
BATCH = 32
# One 2048x2048 Dense layer with its Adam slots: 3 x 16 MiB.
LAYER_MB = 3 * FEATURES * FEATURES * 4 / 1e6
PHASES = ("import", "connect", "take", "build", "restore", "reposition", "step")
# Resume variants: name -> what the child sets before it resumes.
VARIANTS = ("prefetch", "no-prefetch", "baseline")


def _load_emulator() -> type:
    path = os.path.join(ROOT, "tests", "support", "emulator.py")
    spec = importlib.util.spec_from_file_location("_bench_emulator", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Emulator  # type: ignore[no-any-return]


# --- the child: one process, as a rerun of the notebook -----------------------------


def _child(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    import keras
    import tensorflow as tf

    import colab_resume as cr

    marks = {"import": time.perf_counter()}
    layers = max(1, round(args.state_mb / LAYER_MB))
    x = tf.random.stateless_normal([BATCH * 8, FEATURES], seed=[1, 2])
    y = tf.random.stateless_uniform([BATCH * 8], seed=[3, 4], maxval=10, dtype=tf.int64)

    def build_model() -> keras.Model:
        marks.pop("built", None)
        model = keras.Sequential(
            [keras.Input((FEATURES,))]
            + [keras.layers.Dense(FEATURES, activation="relu") for _ in range(layers)]
            + [keras.layers.Dense(10)]
        )
        model.compile(
            optimizer="adam",
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        marks["built"] = time.perf_counter()
        return model

    def make_dataset(epoch: int, skip: int = 0) -> tf.data.Dataset:
        ds = tf.data.Dataset.range(BATCH * 8).shuffle(BATCH * 8, seed=epoch)
        ds = ds.batch(BATCH, drop_remainder=True).skip(skip)
        return ds.map(lambda i: (tf.gather(x, i), tf.gather(y, i)))

    options = {"token": "anon", "endpoint_url": args.endpoint}
    if args.role == "seed":
        agent = cr.Agent(args.run_dir, save_every_steps=2, storage_options=options)
        agent.on_step(lambda step: step >= 2 and _after_seed(agent))
        agent.fit(build_model, make_dataset, epochs=1, steps_per_epoch=8, verbose=0)
        raise SystemExit("the seed run did not stop after its checkpoint")

    if args.role == "plain":
        figures = _plain_keras(build_model, make_dataset)
        figures["import"] = marks["import"] - started
        print("FIGURES " + json.dumps(figures), flush=True)
        return

    if args.variant == "no-prefetch":
        from colab_resume.agent import loop

        loop.PREFETCH = False
    figures: dict[str, object] = {}
    raw_first = args.order % 2 == 0
    if raw_first:
        figures.update(_raw_download(args, options))

    agent = cr.Agent(
        args.run_dir,
        save_every_steps=10_000,
        save_every_seconds=None,
        takeover=True,
        storage_options=options,
    )
    seen: dict[str, float] = {}
    restored: dict[str, float] = {}

    def on_event(event: object) -> None:
        kind = getattr(event, "kind", "")
        seen.setdefault(kind, time.perf_counter())
        if kind == "checkpoint.restored":
            restored.update(getattr(event, "data", {}).get("seconds", {}))

    agent.events.subscribe(on_event)
    before = time.perf_counter()
    agent.connect()
    marks["connect"] = time.perf_counter()

    def finish() -> None:
        taken = seen.get("lease.taken") or seen.get("lease.takeover")
        assert taken is not None and "checkpoint.restored" in seen, sorted(seen)
        marks["take"] = taken
        marks["restore"] = seen["checkpoint.restored"]
        marks["build"] = marks["built"]
        order = [started] + [marks[p] for p in PHASES]
        figures["phases"] = {p: order[i + 1] - order[i] for i, p in enumerate(PHASES)}
        figures["restore_parts"] = restored
        figures["after_imports"] = marks["step"] - before
        if not raw_first:
            figures.update(_raw_download(args, options))
        print("FIGURES " + json.dumps(figures), flush=True)
        os._exit(0)  # as a death: the next repeat takes the run over

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            marks.setdefault("reposition", time.perf_counter())

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            marks.setdefault("step", time.perf_counter())
            finish()

    agent.fit(
        build_model,
        make_dataset,
        epochs=1,
        steps_per_epoch=8,
        callbacks=[FirstStep()],
        verbose=0,
    )
    raise SystemExit("the resumed run did not train a step")


def _after_seed(agent: object) -> None:
    manager = agent._loop.checkpoints  # type: ignore[attr-defined]  # internal
    manager.wait()
    manager.check()
    os._exit(0)


def _raw_download(args: argparse.Namespace, options: dict) -> dict[str, object]:
    """A plain gcsfs get of the newest checkpoint's files (as gcsfs does it)."""
    import gcsfs

    fs = gcsfs.GCSFileSystem(**options)
    root = args.run_dir.removeprefix("gs://")
    newest = sorted(fs.ls(f"{root}/checkpoints"))[-1]
    files = [f for f in fs.ls(newest) if not f.endswith("MANIFEST.json")]
    nbytes = sum(fs.info(f)["size"] for f in files)
    with tempfile.TemporaryDirectory() as local:
        started = time.perf_counter()
        fs.get(files, [os.path.join(local, os.path.basename(f)) for f in files])
        seconds = time.perf_counter() - started
    return {"raw_download": seconds, "bytes": nbytes}


def _plain_keras(build_model: Any, make_dataset: Any) -> dict[str, object]:
    """build_model() and one step of plain ``fit``: the cost of any first step."""
    started = time.perf_counter()
    model = build_model()
    model.fit(make_dataset(0), steps_per_epoch=1, epochs=1, verbose=0)
    return {"plain_first_step": time.perf_counter() - started}


# --- the driver ---------------------------------------------------------------------


def _run_child(
    args: argparse.Namespace, role: str, order: int, variant: str = "prefetch"
) -> dict:
    cmd = [sys.executable, __file__, "--child", role, "--order", str(order)]
    cmd += ["--endpoint", args.endpoint, "--run-dir", args.run_dir]
    cmd += ["--state-mb", str(args.state_mb), "--variant", variant]
    env = dict(os.environ)
    if variant == "baseline":
        env["BENCH_FIRST_STEP_SRC"] = os.path.abspath(args.baseline_src)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{role} process failed ({done.returncode}):\n{done.stderr}")
    for line in done.stdout.splitlines():
        if line.startswith("FIGURES "):
            return json.loads(line[len("FIGURES ") :])
    return {}


def _spread(values: list[float], unit: float = 1.0, fmt: str = "{:.2f}") -> str:
    med = statistics.median(values) * unit
    low, high = min(values) * unit, max(values) * unit
    return f"{fmt.format(med)} ({fmt.format(low)}-{fmt.format(high)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-mb", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--baseline-src",
        help="a checkout of an earlier version, resumed too in every round",
    )
    parser.add_argument("--variant", default="prefetch", help=argparse.SUPPRESS)
    parser.add_argument(
        "--child", choices=("seed", "resume", "plain"), help=argparse.SUPPRESS
    )
    parser.add_argument("--order", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.role = args.child
        _child(args)
        return

    emulator = _load_emulator()()
    try:
        bucket = f"first-step-{os.getpid()}"
        emulator.create_bucket(bucket)
        args.endpoint, args.run_dir = emulator.url, f"gs://{bucket}/run"
        _run_child(args, "seed", 0)
        variants = [v for v in VARIANTS if v != "baseline" or args.baseline_src]
        runs: dict[str, list[dict]] = {v: [] for v in variants}
        for r in range(args.repeats):  # interleaved: noise hits all alike
            plain = _run_child(args, "plain", r)
            turn = variants[r % len(variants) :] + variants[: r % len(variants)]
            for variant in turn:
                runs[variant].append(_run_child(args, "resume", r, variant))
                runs[variant][-1]["plain"] = plain
    finally:
        emulator.stop()
    for variant in variants:
        print(f"\n### resume: {variant}\n")
        print(table(runs[variant], args))
    print(f"\n{summary(runs)}")


def table(runs: list[dict], args: argparse.Namespace) -> str:
    raw = [r["raw_download"] for r in runs]
    lines = [
        f"`python bench/bench_first_step.py --state-mb {args.state_mb} "
        f"--repeats {args.repeats}`: {runs[0]['bytes'] / 1e6:.0f} MB of "
        f"checkpoint, {len(runs)} fresh processes; medians (min-max), seconds",
        "",
        "| phase | seconds | / raw download |",
        "|---|---|---|",
    ]
    for phase in PHASES:
        values = [r["phases"][phase] for r in runs]
        ratio = [v / d for v, d in zip(values, raw, strict=True)]
        lines.append(f"| {phase} | {_spread(values)} | {_spread(ratio)} |")
        if phase == "restore":
            for part in ("list", "verify", "download", "read"):
                values = [float(r["restore_parts"].get(part, 0.0)) for r in runs]
                lines.append(
                    f"| &nbsp; restore: {part} | {_spread(values, fmt='{:.3f}')} | |"
                )
    after = [r["after_imports"] for r in runs]
    ratio = [a / d for a, d in zip(after, raw, strict=True)]
    plain = [r["plain"]["plain_first_step"] for r in runs]
    # What resuming adds to what any first step costs: paired by repeat
    # (the two processes ran one after the other).
    added = [a - p for a, p in zip(after, plain, strict=True)]
    build = [r["phases"]["build"] for r in runs]
    overlapped = [b + r["phases"]["restore"] for b, r in zip(build, runs, strict=True)]
    lines += [
        f"| build + restore | {_spread(overlapped)} | "
        f"{_spread([o / d for o, d in zip(overlapped, raw, strict=True)])} |",
        f"| **all but imports** | **{_spread(after)}** | "
        f"**{_spread(ratio)}** (goal <= 2) |",
        f"| raw gcsfs get of the same files | {_spread(raw, fmt='{:.3f}')} | 1 |",
        f"| plain Keras: build_model + one-step fit | {_spread(plain)} | "
        f"{_spread([p / d for p, d in zip(plain, raw, strict=True)])} |",
        f"| all but imports - plain Keras (what resuming adds) | {_spread(added)} | "
        f"{_spread([a / d for a, d in zip(added, raw, strict=True)])} "
        f"(goal <= 0.2) |",
    ]
    return "\n".join(lines)


def summary(runs: dict[str, list[dict]]) -> str:
    """What resuming adds over the raw download, variant by variant, paired
    by round (each round's processes ran one after another)."""
    lines = [
        "| resume | what resuming adds / raw download | restore (s) | build (s) |",
        "|---|---|---|---|",
    ]
    for variant, rows in runs.items():
        added = [
            (r["after_imports"] - r["plain"]["plain_first_step"]) / r["raw_download"]
            for r in rows
        ]
        restore = [r["phases"]["restore"] for r in rows]
        build = [r["phases"]["build"] for r in rows]
        lines.append(
            f"| {variant} | {_spread(added)} | {_spread(restore)} | {_spread(build)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

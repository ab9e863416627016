"""Goodput under random deaths: what the product reports vs the bench's clock.

    python bench/goodput.py [--mean-between-deaths 60] [--seed 0]
        [--epochs 8] [--steps-per-epoch 1500] [--cadences 10,100,1000]
        [--floor 0.05] [--prior 120] [--json results.json] [--keep DIR]

One run of a small Keras workload (an MLP, TensorFlow on CPU) per
contender, each SIGKILLed at the same Poisson times (exponential gaps of
``--mean-between-deaths`` seconds from a fixed seed, counted from the
contender's first launch) and rerun at once, until it finishes:

- ``cr@N``: ``Agent.fit`` on a local run directory, a save every N steps;
- ``cr@auto``: ``save_every="auto"`` with ``--floor`` as its floor and
  ``--prior`` as its prior time between failures. The product's defaults
  (a 30 s floor, a one-hour prior) are for deaths hours apart; this bench
  compresses a day of deaths into minutes. The prior is scaled by 30 (1 h
  -> 2 min, still six times the truth at a mean of 20 s); the floor is set
  to 0.05 s, about the interval of a save every 10 steps, the fastest fixed
  contender: the fixed cadences have no floor, and the contest is between
  choices, not between a choice and a bound (at 1 s, the floor scaled by
  30, ``"auto"`` was held above the interval it had chosen);
- ``bar``: Keras ``model.fit`` with ``BackupAndRestore`` (a save at every
  epoch's end, Keras' default), resumed by running the same script again.

Per contender it prints the total time to finish, the deaths that landed,
the goodput from the bench's own clock, and for the agent the goodput the
product reports from its run directory (``read_goodput``, what
``colab-resume status`` prints), with the difference in percentage points.

The bench's truth: the total is from the first launch to the worker's
first "done" record (training done and the agent closed; the interpreter's own
teardown after it, a second or two of TensorFlow's, is not the run's: a
notebook's kernel lives on), on the one machine's clock; a step's time is
the gap between its end and the previous step's end in the same process,
less the saves inside that gap (each save's wall time, logged by the
worker); a process's first step is counted at its median step (its excess
is start-up: compiling); each step counts once, in the process that ran it
last, and every earlier run of it was redone. Productive time is the sum
over the run's steps, goodput that over the total. Nothing of the
product's accounting is used for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

FEATURES, HIDDEN, CLASSES, BATCH, POOL = 256, 512, 10, 128, 64


# ---------------------------------------------------------------- the worker


def _log(fd: int, **record: Any) -> None:
    # One write per line: what was written before a SIGKILL survives it.
    os.write(fd, (json.dumps(record) + "\n").encode())


def _build_model() -> Any:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _batches(steps: int) -> Any:
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    x = rng.randn(POOL * BATCH, FEATURES).astype("float32")
    y = rng.randint(0, CLASSES, size=(POOL * BATCH,)).astype("int64")
    pool = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    return pool.repeat().take(steps)


def _step_logger(fd: int, steps_per_epoch: int) -> Any:
    import keras

    class StepLog(keras.callbacks.Callback):
        epoch = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            step = self.epoch * steps_per_epoch + batch + 1
            _log(fd, ev="step", step=step, wall=time.time())

    return StepLog()


def _timed(fd: int, save: Any) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.time()
        try:
            return save(*args, **kwargs)
        finally:
            _log(fd, ev="save", began=began, wall=time.time())

    return timed


def worker(args: argparse.Namespace) -> None:
    fd = os.open(args.events, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _log(fd, ev="start", pid=os.getpid(), wall=time.time())
    spe, epochs = args.steps_per_epoch, args.epochs
    if args.contender == "bar":
        logger = _step_logger(fd, spe)
        import keras

        class TimedBackupAndRestore(keras.callbacks.BackupAndRestore):
            pass

        TimedBackupAndRestore._save_model = _timed(  # type: ignore[method-assign]
            fd, keras.callbacks.BackupAndRestore._save_model
        )
        model = _build_model()
        backup = TimedBackupAndRestore(args.run_dir)
        model.fit(_batches(spe), epochs=epochs, callbacks=[logger, backup], verbose=0)
    else:
        import colab_resume as cr
        from colab_resume.agent import steps

        # The whole save the training thread waits for: snapshot and hand-off.
        steps.StepDuties.save = _timed(  # type: ignore[method-assign]
            fd, steps.StepDuties.save
        )
        cadence = args.contender.split("@", 1)[1]
        options: dict[str, Any] = (
            {
                "save_every": "auto",
                "save_every_floor_seconds": args.floor,
                "save_every_prior_seconds": args.prior,
            }
            if cadence == "auto"
            else {"save_every_steps": int(cadence), "save_every_seconds": None}
        )
        with cr.Agent(args.run_dir, **options) as agent:
            # The agent's own global step: a resumed epoch's begin is not
            # delivered again to callbacks, so a callback cannot count it.
            agent.on_step(lambda step: _log(fd, ev="step", step=step, wall=time.time()))
            agent.fit(
                _build_model,
                lambda epoch: _batches(spe),
                epochs=epochs,
                steps_per_epoch=spe,
                verbose=0,
            )
    _log(fd, ev="done", wall=time.time())


# ---------------------------------------------------------------- the driver


def poisson_deaths(mean: float, seed: int, horizon: float) -> list[float]:
    """Seconds after a contender's first launch at which it is killed."""
    rng, times, t = random.Random(seed), [], 0.0
    while t < horizon:
        t += rng.expovariate(1.0 / mean)
        times.append(t)
    return times


def run_contender(
    name: str, deaths: list[float], args: argparse.Namespace, root: str
) -> dict[str, Any]:
    """Launch, kill at the schedule's times, relaunch at once, until done."""
    run_dir = os.path.join(root, name.replace("@", "-"))
    events = run_dir + ".events.jsonl"
    command = [sys.executable, os.path.abspath(__file__), "--worker", name]
    command += ["--run-dir", run_dir, "--events", events]
    command += ["--epochs", str(args.epochs), "--steps-per-epoch"]
    command += [str(args.steps_per_epoch), "--floor", str(args.floor)]
    command += ["--prior", str(args.prior)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    pending = list(deaths)
    kills: list[float] = []
    launched = time.time()
    while True:
        with open(run_dir + ".log", "a") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=out, env=env)
        while True:
            wait = launched + pending[0] - time.time() if pending else None
            try:
                code = proc.wait(timeout=None if wait is None else max(0.0, wait))
                break
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills.append(pending.pop(0))
                code = None
                print(f"  {name}: SIGKILL at {kills[-1]:.0f}s", flush=True)
                break
        if code is None:
            continue
        if code != 0:
            # A contender whose own files a kill destroyed cannot go on:
            # that is a result (Keras' backup is one file written in place).
            with open(run_dir + ".log") as log:
                last = [line.strip() for line in log if line.strip()][-1:]
            print(f"  {name}: exit {code} after {len(kills)} deaths", flush=True)
            return {
                "name": name,
                "kills": len(kills),
                "kill_times": kills,
                "failed": f"exit {code}: {last[0] if last else '?'}",
            }
        break
    result = truth(events, launched)
    result.update(name=name, kills=len(kills), kill_times=kills)
    if name != "bar":
        result.update(reported(run_dir))
    return result


def truth(path: str, launched: float) -> dict[str, Any]:
    """Goodput by the bench's own clock (see the module docstring)."""
    with open(path) as f:
        records = []
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line torn by the kill
                continue
    kept: dict[int, float] = {}
    redone = saves = 0.0
    process: list[tuple[int, float]] = []  # this process's (step, seconds)
    previous: float | None = None
    saved_since = 0.0

    def close(steps: list[tuple[int, float]]) -> None:
        nonlocal redone
        if not steps:
            return
        median = statistics.median(s for _, s in steps[1:]) if len(steps) > 1 else 0.0
        for i, (step, seconds) in enumerate(steps):
            seconds = median if i == 0 else seconds
            redone += kept.get(step, 0.0)
            kept[step] = seconds

    for record in records:
        if record["ev"] == "done":
            break
        if record["ev"] == "start":
            close(process)
            process, previous, saved_since = [], None, 0.0
        elif record["ev"] == "save":
            saves += record["wall"] - record["began"]
            saved_since += record["wall"] - record["began"]
        elif record["ev"] == "step":
            gap = record["wall"] - previous - saved_since if previous else 0.0
            process.append((record["step"], max(0.0, gap)))
            previous, saved_since = record["wall"], 0.0
    close(process)
    # Training ended at the first "done": a kill that lands while that
    # process exits makes one more run, which finds the run completed.
    total = next(r["wall"] for r in records if r["ev"] == "done") - launched
    productive = sum(kept.values())
    return {
        "total_seconds": total,
        "steps": len(kept),
        "true_goodput": productive / total,
        "true_redone_seconds": redone,
        "true_save_seconds": saves,
    }


def reported(run_dir: str) -> dict[str, Any]:
    """What the product says of the run, from its run directory alone."""
    from colab_resume.report.goodput import read_goodput
    from colab_resume.storage import Storage

    result = read_goodput(Storage(run_dir))
    return {
        "reported_goodput": result.goodput,
        "reported": result.to_json(),
        "table": result.table(),
    }


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def markdown(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"Deaths at Poisson times, a mean of {args.mean_between_deaths:g} s apart "
        f"(seed {args.seed}); {args.epochs} epochs x {args.steps_per_epoch} steps.",
        "",
        "| contender | deaths | time to finish | goodput (bench's clock) "
        "| goodput (reported) | difference | blocking saves | redone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "failed" in r:
            lines.append(
                f"| {r['name']} | {r['kills']} | did not finish: {r['failed']} "
                f"| - | - | - | - | - |"
            )
            continue
        rep = r.get("reported_goodput")
        diff = f"{(rep - r['true_goodput']) * 100:+.1f} pp" if rep is not None else "-"
        lines.append(
            f"| {r['name']} | {r['kills']} | {_minutes(r['total_seconds'])} "
            f"| {r['true_goodput']:.1%} | {f'{rep:.1%}' if rep is not None else '-'} "
            f"| {diff} | {r['true_save_seconds']:.1f} s "
            f"| {r['true_redone_seconds']:.1f} s |"
        )
    finished = [r for r in results if "failed" not in r]
    fixed = [
        r for r in finished if r["name"].startswith("cr@") and r["name"] != "cr@auto"
    ]
    auto = next((r for r in finished if r["name"] == "cr@auto"), None)
    if fixed and auto:
        best = max(fixed, key=lambda r: r["true_goodput"])
        lines += [
            "",
            f"save_every='auto' {auto['true_goodput']:.1%} vs the best fixed cadence "
            f"({best['name']}) {best['true_goodput']:.1%}: "
            f"{(auto['true_goodput'] - best['true_goodput']) * 100:+.1f} pp.",
        ]
        if auto.get("reported", {}).get("save_every_auto"):
            lines.append(f"auto's last choice: {auto['reported']['save_every_auto']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--events", help=argparse.SUPPRESS)
    parser.add_argument("--mean-between-deaths", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--steps-per-epoch", type=int, default=1500)
    parser.add_argument("--cadences", default="10,100,1000")
    parser.add_argument("--floor", type=float, default=0.05)
    parser.add_argument("--prior", type=float, default=120.0)
    parser.add_argument("--contenders", help="comma-separated subset to run")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument(
        "--keep", help="put the run directories here (kept), not in a temporary one"
    )
    args = parser.parse_args()
    if args.worker:
        args.contender = args.worker
        worker(args)
        return
    names = [f"cr@{n}" for n in args.cadences.split(",")] + ["cr@auto", "bar"]
    if args.contenders:
        names = [n for n in names if n in args.contenders.split(",")]
    deaths = poisson_deaths(args.mean_between_deaths, args.seed, horizon=86_400)
    results = []
    with contextlib.ExitStack() as stack:
        root = args.keep or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="goodput-bench-")
        )
        os.makedirs(root, exist_ok=True)
        for name in names:
            print(f"{name}: training", flush=True)
            result = run_contender(name, deaths, args, root)
            results.append(result)
            if "failed" in result:
                continue
            print(
                f"{name}: {_minutes(result['total_seconds'])}, "
                f"{result['kills']} deaths, goodput {result['true_goodput']:.1%}",
                flush=True,
            )
            for line in result.get("table", []):
                print("   ", line)
    print()
    print(markdown(results, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

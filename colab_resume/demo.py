"""``colab-resume demo``: train, die silently, get found dead, resume, match bitwise.

The story, in real processes on a local run directory, on the CPU with a
2-replica MirroredStrategy (the "TPU rehearsal"):

1. A reference process trains a small Keras model start to finish.
2. A second process trains the same model into a fresh run directory,
   checkpointing every 10 steps and beating every 0.5 s.
3. Mid-run it is killed with SIGKILL, as a Colab VM vanishes: no cleanup,
   no last words. ``inspect`` reports the run DEAD at once: on this
   machine the killed process is provably gone (from another machine, once
   the heartbeat is older than ``dead_after_seconds``).
4. A new process runs the same training code again: it takes the run over,
   restores the last committed checkpoint, repositions the data and
   finishes — with final weights bitwise equal to the reference.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

HEARTBEAT_SECONDS = 0.5
DEAD_AFTER_SECONDS = 2.0
EPOCHS, STEPS_PER_EPOCH = 4, 25


def _train(run_dir: str, out: str) -> None:
    """Child process: the user's training script, as it would be written."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    from colab_resume import Agent

    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    rng = np.random.RandomState(0)
    x = rng.randn(2000, 16).astype("float32")
    y = (np.sin(x) @ rng.randn(16, 1)).astype("float32")

    def build_model() -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input((16,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dropout(0.2),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer="adam", loss="mse")
        return model

    def make_dataset(epoch: int, skip: int = 0) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2000, seed=epoch)
        return ds.batch(64, drop_remainder=True).skip(skip)

    # keras ships no type hints; Slow slows the story down so it is watchable.
    class Slow(keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(
            self, batch: int, logs: dict[str, Any] | None = None
        ) -> None:
            time.sleep(0.03)

    agent = Agent(
        run_dir,
        save_every_steps=10,
        heartbeat_seconds=HEARTBEAT_SECONDS,
        dead_after_seconds=DEAD_AFTER_SECONDS,
        prefer="cpu",
        cpu_replicas=2,
    )
    agent.fit(
        build_model,
        make_dataset,
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        callbacks=[Slow()],
        verbose=0,
    )
    variables = agent.model.variables + agent.model.optimizer.variables
    np.savez(out, *[v.numpy() for v in variables])


def _child(run_dir: str, out: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "colab_resume.demo", "--train", run_dir, out],
        stderr=subprocess.DEVNULL,
    )


def main(run_dir: str | None = None) -> int:
    """Run the demo; prints a timeline. Returns 0 when every act behaved."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:  # the children need it
        print(
            "The demo trains a model: install TensorFlow first "
            "(pip install tensorflow)."
        )
        return 2
    import numpy as np

    import colab_resume as cr

    base = tempfile.mkdtemp(prefix="colab-resume-demo-")
    run_dir = run_dir or os.path.join(base, "run")
    # Here, not by the child: inspect() polls it before the child's first
    # session creates it, and a local run directory that is missing is a typo.
    os.makedirs(run_dir, exist_ok=True)
    start = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {text}", flush=True)

    total = EPOCHS * STEPS_PER_EPOCH
    say(f"1. reference: training {total} steps uninterrupted (2 CPU replicas)...")
    reference = os.path.join(base, "reference.npz")
    if _child(os.path.join(base, "reference-run"), reference).wait() != 0:
        say("UNEXPECTED: the reference run failed")
        return 1

    say(
        f"2. training into {run_dir}, checkpoint every 10 steps, heartbeat every "
        f"{HEARTBEAT_SECONDS}s"
    )
    resumed = os.path.join(base, "resumed.npz")
    child = _child(run_dir, resumed)
    try:
        status = cr.inspect(run_dir)
        while not (status.checkpoint_step or 0) >= 30 or (status.step or 0) < 35:
            if child.poll() is not None:
                say("UNEXPECTED: training ended before it could be killed")
                return 1
            time.sleep(0.1)
            status = cr.inspect(run_dir)
        say(
            f"   {status.state} at step {status.step}, last checkpoint at step "
            f"{status.checkpoint_step}, on {status.accelerator}"
        )
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        killed_at = time.monotonic()
        say("3. SIGKILL: the session vanished without a word, like a Colab VM")
        while (status := cr.inspect(run_dir)).state != "DEAD":
            say(f"   {status.state}: heartbeat {status.heartbeat_age_s}s old")
            time.sleep(0.5)
        say(
            f"   DEAD, {time.monotonic() - killed_at:.1f}s after the kill "
            f"({status.detail})"
        )
    finally:
        if child.poll() is None:
            child.kill()

    say("4. running the same training code again...")
    if _child(run_dir, resumed).wait() != 0:
        say("UNEXPECTED: the resumed run failed")
        return 1
    status = cr.inspect(run_dir)
    say(f"   {status.state}: lease {status.lease}, finished at step {status.step}")
    a, b = np.load(reference), np.load(resumed)
    equal = all(np.array_equal(a[k], b[k]) for k in a.files)
    say(f"   final weights bitwise equal to the uninterrupted run: {equal}")
    say(f"   see the run: colab-resume ls {run_dir}")
    return 0 if equal and status.state == "COMPLETED" else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", nargs=2, metavar=("RUN_DIR", "OUT"))
    args = parser.parse_args()
    if args.train:
        _train(*args.train)
    else:
        sys.exit(main())

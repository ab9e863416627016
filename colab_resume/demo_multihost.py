"""``colab-resume demo --processes 2``: one run on two JAX processes loses one.

The multi-host story on one machine, in real processes (JAX on the CPU,
two processes of two devices each, gloo collectives, a coordinator on
127.0.0.1), as a pod slice would live it:

1. A reference pair of processes trains a small Keras model to the end.
2. A second pair trains the same model into a fresh run directory; mid-run
   process 1 is killed with SIGKILL, as a host vanishes. Process 0 sees its
   peer's beat stop and exits 75 (RESTART), not hanging in a collective;
   ``inspect`` says the run is DEAD and names the host.
3. Both processes start again, as a launcher restarts the whole job: they
   resume from the last committed step and finish with final weights
   bitwise equal to the reference.

Needs JAX and Keras (``pip install jax keras``), no TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

EPOCHS, STEPS_PER_EPOCH, GLOBAL_BATCH = 2, 10, 8
PEER_DEAD_AFTER_SECONDS = 3.0
KILL_AT_STEP = 9


def _train(run_dir: str, out: str, process: int, port: int) -> None:
    """Child process: the training script every host runs."""
    import keras
    import numpy as np

    import colab_resume as cr

    keras.utils.set_random_seed(7)

    def build_model() -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input((5,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dropout(0.2),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
        return model

    def make_dataset(epoch: int, skip: int = 0) -> list[tuple[object, object]]:
        # The global batches; the agent feeds each process its own rows.
        rng = np.random.default_rng(epoch)
        x = rng.normal(size=(STEPS_PER_EPOCH * GLOBAL_BATCH, 5)).astype("float32")
        y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
        rows = range(skip * GLOBAL_BATCH, len(x), GLOBAL_BATCH)
        return [(x[i : i + GLOBAL_BATCH], y[i : i + GLOBAL_BATCH]) for i in rows]

    agent = cr.Agent(
        run_dir,
        prefer="cpu",
        cpu_replicas=2,
        save_every_steps=3,
        heartbeat_seconds=0.5,
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=2,
        process_id=process,
        peer_dead_after_seconds=PEER_DEAD_AFTER_SECONDS,
    )

    def on_step(step: int) -> None:
        print(f"STEP {step}", flush=True)
        time.sleep(0.1)  # slow enough for the kill to land mid-run

    agent.on_step(on_step)
    agent.fit(
        build_model,
        make_dataset,
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        verbose=0,
    )
    model = agent.model
    values = [np.asarray(v.value) for v in model.variables]
    values += [np.asarray(v.value) for v in model.optimizer.variables]
    np.savez(out, *values)


class _Pair:
    """The two processes of one start of the job."""

    def __init__(self, run_dir: str, out: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", __name__, "--train", run_dir]
                + [f"{out}.p{k}.npz", str(k), str(port)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            for k in (0, 1)
        ]

    def wait_for_step(self, k: int, step: int) -> int | None:
        """Read process ``k``'s steps until ``step``; None if it ended first."""
        stdout = self.procs[k].stdout
        assert stdout is not None
        for line in stdout:
            if line.startswith("STEP ") and int(line.split()[1]) >= step:
                return int(line.split()[1])
        return None

    def wait(self) -> list[int]:
        for proc in self.procs:
            if proc.stdout is not None:
                proc.stdout.read()  # drain, so no child blocks on a full pipe
        return [proc.wait(timeout=300) for proc in self.procs]

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()


def main(run_dir: str | None = None) -> int:
    """Run the demo; prints a timeline. Returns 0 when every act behaved."""
    import importlib.util

    if importlib.util.find_spec("jax") is None or not importlib.util.find_spec("keras"):
        print(
            "The multi-process demo trains on JAX: install it first "
            "(pip install jax keras)."
        )
        return 2
    import numpy as np

    import colab_resume as cr
    from colab_resume import exit_status

    base = tempfile.mkdtemp(prefix="colab-resume-demo-")
    run_dir = run_dir or os.path.join(base, "run")
    start = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {text}", flush=True)

    total = EPOCHS * STEPS_PER_EPOCH
    say(f"1. reference: 2 processes x 2 CPU devices train {total} steps...")
    reference = os.path.join(base, "reference")
    pair = _Pair(os.path.join(base, "reference-run"), reference)
    if pair.wait() != [0, 0]:
        say("UNEXPECTED: the reference run failed")
        return 1

    say(f"2. 2 processes train into {run_dir}, a checkpoint every 3 steps")
    resumed = os.path.join(base, "resumed")
    pair = _Pair(run_dir, resumed)
    try:
        at = pair.wait_for_step(1, KILL_AT_STEP)
        if at is None or at >= total:
            say("UNEXPECTED: training ended before process 1 could be killed")
            return 1
        os.kill(pair.procs[1].pid, signal.SIGKILL)
        killed = time.monotonic()
        say(f"   SIGKILL to process 1 at step {at}: a host vanished")
        code = pair.wait()[0]
        said = "RESTART" if code == exit_status.RESTART else "UNEXPECTED"
        say(
            f"   process 0 exited {code} ({said}) {time.monotonic() - killed:.1f}s "
            f"later (its peer's beat stopped; bound {PEER_DEAD_AFTER_SECONDS:.0f}s)"
        )
        if code != exit_status.RESTART:
            return 1
        status = cr.inspect(run_dir)
        say(f"   colab-resume status: {status.state}, {status.detail}")
        for beat in status.processes:
            say(f"     process {beat.process}: {beat.verdict} ({beat.state})")
        say(f"   last committed step: {status.checkpoint_step}")
    finally:
        pair.kill()

    say("3. the launcher starts both processes again...")
    pair = _Pair(run_dir, resumed)
    if pair.wait() != [0, 0]:
        say("UNEXPECTED: the resumed run failed")
        return 1
    status = cr.inspect(run_dir)
    say(f"   {status.state}: lease {status.lease}, finished at step {status.step}")
    equal = True
    for k in (0, 1):
        a = np.load(f"{reference}.p{k}.npz")
        b = np.load(f"{resumed}.p{k}.npz")
        equal = equal and all(np.array_equal(a[n], b[n]) for n in a.files)
    say(f"   final weights bitwise equal to the uninterrupted run: {equal}")
    say(f"   see the run: colab-resume ls {run_dir}")
    return 0 if equal and status.state == "COMPLETED" else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", nargs=4, metavar=("RUN_DIR", "OUT", "K", "PORT"))
    args = parser.parse_args()
    if args.train:
        run, out, k, port = args.train
        _train(run, out, int(k), int(port))
    else:
        sys.exit(main())

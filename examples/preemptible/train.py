"""A training script for preemptible capacity: the command every recipe runs.

    COLAB_RESUME_RUN_DIR=gs://BUCKET/runs/NAME python examples/preemptible/train.py

The run directory comes from the launcher (``COLAB_RESUME_RUN_DIR``, Vertex
AI's ``AIP_CHECKPOINT_DIR``, or SkyPilot's ``SKYPILOT_TASK_ID`` under
``COLAB_RESUME_BASE_DIR``), so the same command finds the same run after
every restart. The process exits with a status the launcher acts on:

- 0   the run completed (then ``--on-done CMD`` runs, e.g. deleting the TPU VM);
- 143 SIGTERM or a preemption notice: the final checkpoint is committed,
      restart the same command and it resumes exactly;
- 5   ``stop()`` asked it to stop: do not restart;
- 1   a bug: do not restart blindly.

Runs on Keras 3 with TensorFlow or JAX (``KERAS_BACKEND=jax``: on a TPU VM
it trains data-parallel over every chip). The model is a small regression
so the recipes can be rehearsed anywhere; put yours in ``build_model`` and
``make_dataset``.
"""

from __future__ import annotations

import argparse
import time

import keras
import numpy as np

import colab_resume as cr

EXAMPLES, FEATURES, BATCH = 1024, 16, 32


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--save-every-steps", type=int, default=8)
    parser.add_argument(
        "--on-done", help="teardown command after a COMPLETED run (never a shell)"
    )
    parser.add_argument("--out", help="write the trained variables here (.npz)")
    parser.add_argument(
        "--step-sleep",
        type=float,
        default=0.0,
        help="seconds per step more: a rehearsal's preemption lands mid-run",
    )
    return parser.parse_args()


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES, FEATURES).astype("float32")
    return x, (x @ rng.randn(FEATURES, 1)).astype("float32")


def main() -> None:
    args = parse()
    keras.utils.set_random_seed(0)
    x, y = data()
    steps = EXAMPLES // BATCH
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()

    def make_dataset(epoch: int, skip: int = 0):
        order = np.random.default_rng(epoch).permutation(EXAMPLES)
        batches = [(x[i], y[i]) for i in np.array_split(order, steps)]
        if keras.backend.backend() != "tensorflow":
            return batches[skip:]
        import tensorflow as tf

        xs = np.stack([b[0] for b in batches])
        ys = np.stack([b[1] for b in batches])
        return tf.data.Dataset.from_tensor_slices((xs, ys)).skip(skip)

    def build_model() -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dropout(0.1),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
        return model

    with cr.Agent(  # no run directory: the launcher's environment names it
        save_every_steps=args.save_every_steps,
        heartbeat_seconds=2,
        on_done=args.on_done,
    ) as agent:
        if args.step_sleep:
            agent.on_step(lambda step: time.sleep(args.step_sleep))
        agent.fit(
            build_model,
            make_dataset,
            epochs=args.epochs,
            steps_per_epoch=steps,
            verbose=0,
        )
        # Reached only when the run completed: a preempted one raised
        # cr.Preempted (exit 143) after its final checkpoint.
        model = agent.model
        if args.out:
            variables = list(model.variables) + list(model.optimizer.variables)
            np.savez(
                args.out,
                **{f"v{i:03d}": np.asarray(v) for i, v in enumerate(variables)},
            )
        print(f"COMPLETED at step {model.optimizer.iterations.numpy()}", flush=True)


if __name__ == "__main__":
    main()

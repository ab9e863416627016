"""A training process that logs to the experiment trackers, for tests that kill it.

    PYTHONPATH=tests python tests/workers/tracker_worker.py RUN_DIR
        [--tensorboard LOG_DIR] [--mlflow TRACKING_URI] [--wandb WANDB_DIR]
        [--kill-at-step N]

Trains a small Keras model (one Dense layer) through ``Agent.fit`` for 3
epochs of 60 steps, with validation, a checkpoint every 70 steps, and the
trackers asked for: ``cr.trackers.tensorboard`` (batch summaries),
``cr.trackers.mlflow_run`` and ``cr.trackers.wandb_run`` (offline), each
logging every step. ``--kill-at-step`` SIGKILLs the process itself right
after that step; first it flushes the TensorBoard writer, as one that
flushed just before the death would have, so the steps the next session
trains again are on disk twice. Prints ``RESUMED_AT S`` (the step the
session resumed at, when it did) and ``DONE``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Long enough that W&B's offline writer has put its first block of rows on
# disk (it writes 32 KiB at a time: some 80 rows) past the checkpoint of
# step 70 before the kill at step 130, so the resumed session meets them.
EPOCHS, STEPS_PER_EPOCH, BATCH, SAVE_EVERY = 3, 60, 8, 70


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--tensorboard")
    parser.add_argument("--mlflow")
    parser.add_argument("--wandb")
    parser.add_argument("--kill-at-step", type=int)
    return parser.parse_args()


def main() -> int:
    args = parse()
    import keras
    import numpy as np
    import tensorflow as tf
    from support.dying import kill_if_at

    import colab_resume as cr

    keras.utils.set_random_seed(3)
    tf.config.experimental.enable_op_determinism()
    rng = np.random.RandomState(0)
    x = rng.randn(EPOCHS * STEPS_PER_EPOCH * BATCH, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)

    def make_dataset(epoch: int, skip: int = 0) -> tf.data.Dataset:
        data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=epoch)
        return data.batch(BATCH).take(STEPS_PER_EPOCH).skip(skip)

    def build_model() -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        return model

    agent = cr.Agent(
        args.run_dir,
        save_every_steps=SAVE_EVERY,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        prefer="cpu",
    )
    callbacks = []
    with contextlib.ExitStack() as stack:
        board = None
        if args.tensorboard:
            board = cr.trackers.tensorboard(
                agent, args.tensorboard, update_freq="batch"
            )
            callbacks.append(board)
        if args.mlflow:
            ml = stack.enter_context(
                cr.trackers.mlflow_run(
                    agent, experiment="trackers", tracking_uri=args.mlflow
                )
            )
            callbacks.append(ml.callback(update_freq=1))
        if args.wandb:
            wb = stack.enter_context(
                cr.trackers.wandb_run(agent, project="trackers", dir=args.wandb)
            )
            callbacks.append(wb.callback(update_freq=1))

        def after_step(step: int) -> None:
            if board is not None and step == args.kill_at_step:
                board._train_writer.flush()
            kill_if_at(step, args.kill_at_step)

        agent.on_step(after_step)
        agent.fit(
            build_model,
            make_dataset,
            epochs=EPOCHS,
            steps_per_epoch=STEPS_PER_EPOCH,
            callbacks=callbacks,
            validation_data=tf.data.Dataset.from_tensor_slices((x[:32], y[:32])).batch(
                BATCH
            ),
            verbose=0,
        )
    for event in agent.events.recent(kind="run.resumed_at"):
        print(f"RESUMED_AT {event.step}", flush=True)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two-phase training through the lighter path, maybe dying on the way.

    PYTHONPATH=tests python tests/workers/light_worker.py RUN_DIR OUT.npz
        [--kill-at-step N] [--raise-at-step N] [--between-seconds S]

``agent.restore(model, epochs=4)``, then the user's own ``model.fit`` calls:
phase 1 trains epochs 0-1, phase 2 lowers the learning rate and trains
epochs 2-3, each ``fit`` with its own ``agent.callback()``. A resumed epoch
is finished exactly: a ``fit`` over its remaining batches only. Prints
``BETWEEN`` between the phases (and waits ``--between-seconds``),
``--kill-at-step`` SIGKILLs the process after that step's duties,
``--raise-at-step`` raises from a callback inside ``fit`` and keeps the
process alive (as a notebook would) for the test to read the status.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SPE, BATCH, EPOCHS, PHASE_1 = 12, 16, 4, 2


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--raise-at-step", type=int)
    parser.add_argument("--between-seconds", type=float, default=0.0)
    args = parser.parse_args()

    import keras
    import tensorflow as tf
    from support import toy
    from support.dying import kill_if_at

    from colab_resume.agent import Agent

    keras.utils.set_random_seed(5)
    tf.config.experimental.enable_op_determinism()
    x, y = toy.regression(SPE * BATCH)

    def batches_from(step: int) -> tf.data.Dataset:
        """Every batch of the run, in order, from global step ``step``."""
        epochs = [toy.epoch_batches(x, y, BATCH, e) for e in range(EPOCHS)]
        all_batches = epochs[0]
        for more in epochs[1:]:
            all_batches = all_batches.concatenate(more)
        return all_batches.skip(step)

    done = {"step": 0}

    def after_step(step: int) -> None:  # after the agent's duties of the step
        done["step"] = step
        kill_if_at(step, args.kill_at_step)

    class RaiseAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if done["step"] == args.raise_at_step:
                raise RuntimeError(f"user code failed at step {args.raise_at_step}")

    agent = Agent(
        args.run_dir,
        save_every_steps=5,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        prefer="cpu",
    )
    agent.on_step(after_step)
    restored = {"step": 0}
    agent.events.subscribe(
        lambda e: (
            restored.update(step=e.step)
            if e.kind == "checkpoint.restored"
            else print(f"COMMITTED {e.step}", flush=True)
            if e.kind == "checkpoint.committed"
            else None
        )
    )
    model = toy.model(width=16, dropout=0.2, batch_norm=False, metrics=None)
    start = agent.restore(model, epochs=EPOCHS)
    print(f"RESTORED {start.step}", flush=True)
    extra = [RaiseAt()] if args.raise_at_step else []

    def phase(first: int, end: int) -> None:
        step = max(start.step, first * SPE)
        epoch, skip = divmod(step, SPE)
        if epoch >= end:
            return
        if skip:  # finish the resumed epoch: its remaining batches only
            model.fit(
                batches_from(step),
                initial_epoch=epoch,
                epochs=epoch + 1,
                steps_per_epoch=SPE - skip,
                callbacks=[agent.callback(), *extra],
                verbose=0,
            )
            epoch += 1
        if epoch < end:
            model.fit(
                batches_from(epoch * SPE),
                initial_epoch=epoch,
                epochs=end,
                steps_per_epoch=SPE,
                callbacks=[agent.callback(), *extra],
                verbose=0,
            )

    try:
        phase(0, PHASE_1)
        print("BETWEEN", flush=True)
        time.sleep(args.between_seconds)
        model.optimizer.learning_rate.assign(1e-3)  # fine-tuning
        phase(PHASE_1, EPOCHS)
    except RuntimeError as exc:
        print(f"RAISED {exc}", flush=True)
        time.sleep(3)  # alive, like a notebook kernel after a failed cell
        status = agent.status()
        print(f"STATUS {status.state} {status.holder_state}", flush=True)
        return 0
    variables = list(model.variables) + list(model.optimizer.variables)
    toy.save_variables(args.out, variables)
    print(f"DONE restored={restored['step']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

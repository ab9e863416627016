"""A LoRA fine-tune trained by the agent, for tests that kill it for real.

    PYTHONPATH=tests python tests/workers/lora_worker.py RUN_DIR OUT.npz
        [--endpoint URL] [--frozen once|every|rebuild] [--kill-at-step N]
        [--base-seed S]

The model is what a fine-tune looks like: a frozen base (a ``Dense`` with
``trainable = False``, a LoRA-enabled ``Dense`` whose kernel
``enable_lora(2)`` froze), Dropout (a seed generator's state) and a trained
head, Adam; ``Agent.fit`` on NumPy batches, so it runs on either Keras
backend (op determinism on TensorFlow). OUT.npz gets every model and
optimizer variable, to compare runs bitwise. ``--kill-at-step`` SIGKILLs
the process right after that step; ``--base-seed`` initialises the frozen
base otherwise (another preset version, as far as a resume can tell).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WIDTH = 128  # each frozen kernel: 128 x 128 float32, 64 KiB
BATCH = 8
EXAMPLES = 64  # 8 steps an epoch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--endpoint")
    parser.add_argument("--frozen", default="once")
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--base-seed", type=int, default=11)
    args = parser.parse_args()

    import keras
    import numpy as np
    from support import toy
    from support.drive_emulator import emulator_options
    from support.dying import kill_if_at

    from colab_resume.agent import Agent

    keras.utils.set_random_seed(7)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((EXAMPLES, WIDTH)).astype("float32")
    y = x[:, :1] * 0.5

    def make_dataset(epoch: int, skip: int = 0) -> list:
        order = np.random.default_rng(epoch).permutation(EXAMPLES)
        batches = [
            (x[order[i : i + BATCH]], y[order[i : i + BATCH]])
            for i in range(0, EXAMPLES, BATCH)
        ]
        return batches[skip:]

    def build_model() -> keras.Model:
        # The same frozen base at every build, as a preset's weights are.
        keras.utils.set_random_seed(args.base_seed)
        model = keras.Sequential(
            [
                keras.Input((WIDTH,)),
                keras.layers.Dense(WIDTH, name="base_in"),
                keras.layers.Dense(WIDTH, activation="relu", name="lora"),
                keras.layers.Dropout(0.25),
                keras.layers.Dense(1, name="head"),
            ]
        )
        model.get_layer("base_in").trainable = False
        model.get_layer("lora").enable_lora(2)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
        return model

    options = emulator_options(args.run_dir, args.endpoint) if args.endpoint else None
    agent = Agent(
        args.run_dir,
        save_every_steps=3,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        storage_options=options,
        prefer="cpu",
        frozen=args.frozen,
    )
    steps = {"n": 0}

    def after_step(step: int) -> None:
        steps["n"] += 1
        kill_if_at(step, args.kill_at_step)

    agent.on_step(after_step)
    agent.fit(build_model, make_dataset, epochs=3, steps_per_epoch=8, verbose=0)
    model = agent.model
    toy.save_variables(args.out, [*model.variables, *model.optimizer.variables])
    print(f"DONE steps_here={steps['n']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

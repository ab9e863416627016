"""Train a small Keras-on-JAX model through ``agent.fit``, maybe dying on the way.

    python tests/on_jax/jax_worker.py RUN_DIR OUT_DIR [--kill-at-step N]

Two CPU devices (``cpu_replicas=2``), Dense + Dropout, Adam, NumPy batches.
OUT_DIR receives ``weights.npz`` (every model and optimizer variable, by
position) and ``result.json`` (the step restored from, the steps trained
here, whether TensorFlow was imported). ``--kill-at-step`` SIGKILLs the
process right after the agent's duties of that step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EPOCHS = 2
STEPS_PER_EPOCH = 7
GLOBAL_BATCH = 8


def make_dataset(epoch: int, skip: int = 0) -> list[tuple[object, object]]:
    import numpy as np

    rng = np.random.default_rng(100 + epoch)  # deterministic per epoch
    x = rng.normal(size=(STEPS_PER_EPOCH * GLOBAL_BATCH, 6)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    batches = [
        (x[i : i + GLOBAL_BATCH], y[i : i + GLOBAL_BATCH])
        for i in range(0, len(x), GLOBAL_BATCH)
    ]
    return batches[skip:]


def build_model() -> object:
    import keras

    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    return model


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--kill-at-step", type=int)
    args = parser.parse_args()

    import keras
    import numpy as np
    from support.dying import kill_if_at

    from colab_resume.agent import Agent

    os.makedirs(args.out_dir, exist_ok=True)
    trained = {"steps": 0}

    def after_step(step: int) -> None:
        trained["steps"] += 1
        kill_if_at(step, args.kill_at_step)

    agent = Agent(
        args.run_dir,
        save_every_steps=4,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        prefer="cpu",
        cpu_replicas=2,
    )
    agent.on_step(after_step)
    restored = {"step": 0}

    def on_event(event: object) -> None:
        if getattr(event, "kind", None) == "checkpoint.restored":
            restored["step"] = getattr(event, "step", 0)

    agent.events.subscribe(on_event)
    keras.utils.set_random_seed(11)
    agent.fit(
        build_model,
        make_dataset,
        epochs=EPOCHS,
        steps_per_epoch=STEPS_PER_EPOCH,
        verbose=0,
    )
    model = agent.model
    arrays = {
        f"model_{i:03d}": np.asarray(keras.ops.convert_to_numpy(v.value))
        for i, v in enumerate(model.variables)
    }
    for i, v in enumerate(model.optimizer.variables):
        arrays[f"optimizer_{i:03d}"] = np.asarray(keras.ops.convert_to_numpy(v.value))
    np.savez(os.path.join(args.out_dir, "weights.npz"), **arrays)
    result = {
        "restored_step": restored["step"],
        "steps_here": trained["steps"],
        "tensorflow_imported": "tensorflow" in sys.modules,
        "devices": agent.connection.replicas if agent.connection else None,
        "variables": [v.path for v in model.variables],
    }
    with open(os.path.join(args.out_dir, "result.json"), "w") as handle:
        json.dump(result, handle)
    print(f"DONE steps_here={trained['steps']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Train a model the user sharded with ``ModelParallel``, maybe dying.

    PYTHONPATH=tests python tests/on_jax/mesh_worker.py RUN_DIR OUT_DIR
        [--mesh 2,4 | --data-parallel] [--kill-at-step N] [--refuse]

The user's own distribution, set globally before the Agent is created, as
Keras' docs set it: a ``DeviceMesh`` over 8 CPU devices with axes
``("batch", "model")`` and a ``LayoutMap`` that shards the Dense kernels and
biases over ``"model"``. ``--data-parallel`` sets a ``DataParallel`` instead
(a resume on another layout); ``--refuse`` creates the Agent with
``on_runtime_change="refuse"``.

OUT_DIR receives ``weights.npz`` (every model and optimizer variable) and
``result.json``: the steps restored from, the ``run.runtime_changed``
events, what the agent logged of the distribution, each Dense kernel's
partition spec as trained, and the error, if the resume was refused.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

DEVICES = 8
EPOCHS = 2
STEPS_PER_EPOCH = 6
BATCH = 16


def make_dataset(epoch: int, skip: int = 0) -> list[tuple[object, object]]:
    import numpy as np

    rng = np.random.default_rng(epoch)
    x = rng.normal(size=(STEPS_PER_EPOCH * BATCH, 8)).astype("float32")
    y = (x[:, :4].sum(axis=1, keepdims=True) > 0).astype("float32")
    batches = [(x[i : i + BATCH], y[i : i + BATCH]) for i in range(0, len(x), BATCH)]
    return batches[skip:]


def set_distribution(mesh: str | None) -> None:
    import keras

    devices = keras.distribution.list_devices()
    assert len(devices) == DEVICES, devices
    if mesh is None:
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(devices=devices)
        )
        return
    shape = tuple(int(n) for n in mesh.split(","))
    device_mesh = keras.distribution.DeviceMesh(shape, ("batch", "model"), devices)
    layout_map = keras.distribution.LayoutMap(device_mesh)
    layout_map[".*dense.*kernel"] = (None, "model")
    layout_map[".*dense.*bias"] = ("model",)
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    )


def build_model():  # type: ignore[no-untyped-def]
    import keras

    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(32, activation="relu", name="dense_a"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(8, activation="relu", name="dense_b"),
            keras.layers.Dense(1, activation="sigmoid", name="out"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    return model


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--mesh", default="2,4")
    parser.add_argument("--data-parallel", action="store_true")
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--refuse", action="store_true")
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"

    import keras
    from support.dying import kill_if_at
    from support.processes import write_out

    from colab_resume.agent import Agent
    from colab_resume.agent.runtime_facts import RuntimeChangedError

    said: list[str] = []

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logger = logging.getLogger("colab_resume.backend.jax")
    logger.setLevel(logging.INFO)
    logger.addHandler(Said())
    os.makedirs(args.out_dir, exist_ok=True)
    keras.utils.set_random_seed(4)
    set_distribution(None if args.data_parallel else args.mesh)
    agent = Agent(
        args.run_dir,
        save_every_steps=3,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        prefer="cpu",
        on_runtime_change="refuse" if args.refuse else "continue",
    )
    agent.on_step(lambda step: kill_if_at(step, args.kill_at_step))
    restored: list[int] = []
    changed: list[dict[str, object]] = []

    def keep(event):  # type: ignore[no-untyped-def]
        if event.kind == "checkpoint.restored":
            restored.append(event.step)
        if event.kind == "run.runtime_changed":
            changed.append({"message": event.message, **event.data})

    agent.events.subscribe(keep)
    result: dict[str, object] = {
        "restored": restored,
        "runtime_changed": changed,
        "said": said,
    }
    try:
        agent.fit(
            build_model,
            make_dataset,
            epochs=EPOCHS,
            steps_per_epoch=STEPS_PER_EPOCH,
            verbose=0,
        )
    except RuntimeChangedError as exc:
        result["refused"] = str(exc)
    else:
        model = agent.model
        result["specs"] = {
            v.path: [a for a in v.value.sharding.spec]
            for v in model.trainable_variables
            if "kernel" in v.path
        }
        write_out(args.out_dir, model, result)
        return 0
    with open(os.path.join(args.out_dir, "result.json"), "w") as handle:
        json.dump(result, handle, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

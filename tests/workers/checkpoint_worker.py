"""Subprocess side of the checkpoint tests: train, save or restore, dump state.

Runs in a fresh interpreter because the two logical CPU devices of the
MirroredStrategy must be configured before TensorFlow initialises, and
because a SIGKILL test needs a process to kill.

Usage: python tests/workers/checkpoint_worker.py MODE RUN_DIR ENDPOINT OUT_DIR [UNITS]
  save       train 3 steps, dump state-3.npz, save step 3, train on
             during the upload
  save-kill  save step 1, dump state-1.npz, train, start a slow save of
             step 2 and print "UPLOADING" (the test kills us then)
  restore    build a fresh model in a fresh scope, restore, dump restored.npz
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
)

import keras  # noqa: E402

from colab_resume.checkpoint import CheckpointManager  # noqa: E402
from colab_resume.events import EventLog  # noqa: E402
from colab_resume.storage import Storage  # noqa: E402


def build(strategy, units: int) -> keras.Model:
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((16,)),
                keras.layers.Dense(units, activation="relu"),
                keras.layers.BatchNormalization(),
                keras.layers.Dropout(0.5),
                keras.layers.Dense(units),
                keras.layers.Dense(1),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3), loss="mse", metrics=["mae"]
        )
    return model


def train(model: keras.Model, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8 * steps, 16)).astype("float32")
    y = rng.standard_normal((8 * steps, 1)).astype("float32")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)


def dump(model: keras.Model, path: str) -> None:
    arrays = {
        f"model_{i:04d}": np.asarray(v.numpy()) for i, v in enumerate(model.variables)
    }
    for i, v in enumerate(model.optimizer.variables):
        arrays[f"opt_{i:04d}"] = np.asarray(v.numpy())
    np.savez(path, **arrays)


def main() -> None:
    mode, run_dir, endpoint, out = sys.argv[1:5]
    units = int(sys.argv[5]) if len(sys.argv) > 5 else 32
    # The restoring process starts from different weights, so equality
    # after restore cannot come from identical initialisation.
    keras.utils.set_random_seed(2 if mode == "restore" else 1)
    tf.config.experimental.enable_op_determinism()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    events = EventLog()
    storage = Storage(run_dir, {"token": "anon", "endpoint_url": endpoint})
    slow = mode == "save-kill"
    manager = CheckpointManager(
        storage,
        lease=1 if mode != "restore" else 2,
        fence=lambda: None,
        events=events,
        # One worker and 1 MiB shards make the second upload take a while,
        # so the test can kill us in the middle of it.
        workers=1 if slow else 8,
        shard_bytes=1 << 20,
        staging_dir=os.path.join(out, f"staging-{mode}"),
    )
    model = build(strategy, units)
    if mode == "save":
        train(model, 3, seed=0)
        dump(model, os.path.join(out, "state-3.npz"))
        manager.save(model, step=3, epoch=0, metrics={"loss": 1.5}, extras={"k": [1]})
        # Training goes on while the upload runs; the checkpoint must still
        # hold step 3 exactly (the async write snapshots the variables).
        train(model, 2, seed=5)
        manager.close()
    elif mode == "save-kill":
        train(model, 1, seed=0)
        manager.save(model, step=1, epoch=0)
        manager.wait()
        manager.check()
        dump(model, os.path.join(out, "state-1.npz"))
        train(model, 1, seed=1)
        manager.save(model, step=2, epoch=0)
        print("UPLOADING", flush=True)
        time.sleep(120)  # killed long before this ends
    elif mode == "restore":
        info = manager.restore(model)
        dump(model, os.path.join(out, "restored.npz"))
        with open(os.path.join(out, "restored.json"), "w") as handle:
            json.dump(
                {
                    "step": info.step if info else None,
                    "epoch": info.epoch if info else None,
                    "metrics": info.metrics if info else None,
                    "extras": info.extras if info else None,
                    "skipped": info.skipped if info else None,
                },
                handle,
            )
        manager.close()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()

"""Keras' own ``keras.callbacks.OrbaxCheckpoint``: the baseline.

It runs on the TensorFlow backend: the callback hands Orbax the model's
whole state as NumPy arrays (``model.get_state_tree(value_format=
"numpy_array")``) and Orbax writes them with TensorStore; JAX, which Orbax
imports, trains nothing here. orbax-checkpoint pulls JAX in, so it lives in
a virtualenv of its own (docs/guide/head-to-head.md), not the main one.

On the GCS emulator Orbax writes through TensorStore's GCS driver (pointed
at the emulator by ``TENSORSTORE_GCS_HTTP_URL``) and lists through etils'
paths over gcsfs (``STORAGE_EMULATOR_HOST``; ``EPATH_USE_TF=false``, since
TensorFlow's own GCS client cannot be pointed at an emulator). For the same
reason Keras' ``load_weights("gs://...")``, which checks the path with
``tf.io.gfile`` on this backend, cannot reach it: there the restore makes
the Orbax calls ``load_weights`` makes after that check. Orbax has no way
to Drive but a FUSE mount: not measured there.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench_checkpoint import PeakRSS

from finetune.model import build, changing_bytes, same_state, step

# Stores Orbax writes to here.
STORES = ("local", "gcs")


def unavailable() -> str | None:
    """Why Orbax cannot run in this Python; None where it can."""
    import importlib.util

    try:
        found = importlib.util.find_spec("orbax.checkpoint")
    except ModuleNotFoundError:
        found = None
    return None if found else "orbax-checkpoint is not installed in this Python"


def use_emulator(url: str) -> None:
    """Point Orbax's GCS paths at the emulator at ``url`` (this process)."""
    import fsspec.config

    os.environ["TENSORSTORE_GCS_HTTP_URL"] = url
    # TensorStore sends this token as is; the emulator checks none.
    os.environ["GOOGLE_AUTH_TOKEN_FOR_TESTING"] = "emulator"
    os.environ["STORAGE_EMULATOR_HOST"] = url
    os.environ["EPATH_USE_TF"] = "false"
    fsspec.config.conf.setdefault("gs", {})["token"] = "anon"


def callback(directory: str, save_freq: int) -> Any:
    """The callback as its documentation shows it, keeping 2 checkpoints
    (as the agent's ``keep=2`` here)."""
    import keras

    return keras.callbacks.OrbaxCheckpoint(
        directory, save_freq=save_freq, max_to_keep=2
    )


def measure_saves(directory: str, args: Any) -> dict[str, Any]:
    """The first save, ``args.saves`` later ones with a step between, then a
    restore into a fresh model: what ``bench_finetune`` measures of the
    agent's modes, through the callback's own hooks (as ``fit`` calls them
    at a batch's end, with ``save_freq=1``)."""
    model = build(args.width, args.layers)
    step(model, args.width, 0)
    found: dict[str, Any] = {"changing": changing_bytes(model)}
    saver = callback(directory, save_freq=1)
    saver.set_model(model)

    def save() -> None:
        saver.on_train_batch_end(0)
        saver.wait_until_finished()

    started = time.perf_counter()
    save()
    found["first_s"] = time.perf_counter() - started
    found["first_bytes"] = newest_bytes(directory)
    sizes, seconds, peaks = [], [], []
    for later in range(2, 2 + args.saves):
        step(model, args.width, later)
        rss = PeakRSS()
        began = time.perf_counter()
        save()
        seconds.append(time.perf_counter() - began)
        peaks.append(rss.stop())
        sizes.append(newest_bytes(directory))
    saver.on_train_end()
    found.update(later_bytes=sizes, later_s=seconds, later_peak=peaks)
    fresh = build(args.width, args.layers)
    fresh.optimizer.build(fresh.trainable_variables)
    began = time.perf_counter()
    restore(fresh, directory)
    found["restore_s"] = time.perf_counter() - began
    if not same_state(model, fresh):
        raise AssertionError("Orbax restored another state than the one saved")
    return found


def restore(model: Any, directory: str) -> None:
    """The newest checkpoint into ``model``, as ``model.load_weights`` does."""
    if "://" not in directory:
        model.load_weights(directory)
        return
    import orbax.checkpoint

    ocp = orbax.checkpoint.v1  # an attribute, not a module to import
    checkpointer = ocp.training.Checkpointer(directory=directory)
    latest = checkpointer.latest
    checkpointer.close()
    if latest is None:
        raise RuntimeError(f"no Orbax checkpoint in {directory}")
    loaded = ocp.load_checkpointables(f"{directory}/{latest.step}", {"pytree": None})
    model.set_state_tree(loaded["pytree"])


def newest_bytes(directory: str) -> int:
    """Bytes of the newest step directory: what the last save wrote."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(directory)
    fs.invalidate_cache()  # TensorStore wrote behind gcsfs's listing cache
    steps = [p for p in fs.ls(root, detail=False) if p.rsplit("/", 1)[-1].isdigit()]
    newest = max(steps, key=lambda p: int(p.rsplit("/", 1)[-1]))
    return int(fs.du(newest))

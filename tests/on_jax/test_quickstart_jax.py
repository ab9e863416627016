"""The quickstart notebook's Colab TPU path — Keras on JAX, a Grain pipeline, no
TensorFlow installed — run top to bottom by papermill on the CPU."""

from __future__ import annotations

import glob
import json
import os

from support.notebooks import execute, pngs, text_of


def test_quickstart_on_jax_trains_to_done_without_tensorflow(tmp_path):
    run_dir = str(tmp_path / "run")
    notebook = execute(
        "quickstart.ipynb",
        tmp_path,
        run_dir=run_dir,
        epochs=2,
        steps_per_epoch=5,
        batch_size=32,
        save_every_steps=4,
        data="synthetic",
        backend="auto",  # what a TPU runtime picks: no TensorFlow here, so JAX
    )
    printed = text_of(notebook)
    assert "on jax" in printed, printed
    assert "COMPLETED: step 10, checkpoint 10, lease 1" in printed, printed
    assert len(pngs(notebook)) == 1  # the run report
    assert os.path.exists(os.path.join(run_dir, "DONE.json"))
    # Fed by Grain: every checkpoint carries the iterator's state.
    manifests = glob.glob(os.path.join(run_dir, "checkpoints", "*", "MANIFEST.json"))
    saved = []
    for path in manifests:
        with open(path) as f:
            saved.append(json.load(f)["extras"].get("grain"))
    assert saved and all(s and "state" in s for s in saved), saved

"""The notebooks in notebooks/, run top to bottom by papermill in a real kernel.

Each gets small parameters through its ``parameters`` cell and a local run
directory; the checks read what the cells printed and drew. The install
cell is part of the run: colab_resume is importable here, so it installs
nothing (in Colab it installs the wheel from an upload or My Drive:
tests/test_packaging.py runs it that way). The quickstart's JAX
path runs in tests/on_jax/test_quickstart_jax.py.
"""

from __future__ import annotations

import os

import pytest
from support.notebooks import execute, pngs, text_of

# Tiny runs: the notebooks' own defaults train MNIST for minutes.
SMALL = {"epochs": 2, "steps_per_epoch": 5, "batch_size": 32, "data": "synthetic"}


@pytest.mark.tf
def test_quickstart_trains_to_done_and_draws_the_report(tmp_path):
    run_dir = str(tmp_path / "run")
    notebook = execute(
        "quickstart.ipynb",
        tmp_path,
        run_dir=run_dir,
        save_every_steps=4,
        backend="tensorflow",
        **SMALL,
    )
    printed = text_of(notebook)
    assert "COMPLETED: step 10, checkpoint 10, lease 1" in printed, printed
    assert "Keras" in printed and "on tensorflow" in printed
    assert len(pngs(notebook)) == 1  # the run report
    assert os.path.exists(os.path.join(run_dir, "DONE.json"))


@pytest.mark.tf
def test_custom_loop_runs_its_own_step_to_done(tmp_path):
    run_dir = str(tmp_path / "run")
    notebook = execute(
        "custom_loop.ipynb", tmp_path, run_dir=run_dir, save_every_steps=4, **SMALL
    )
    printed = text_of(notebook)
    assert "COMPLETED: step 10, checkpoint 10, lease 1" in printed, printed
    assert "'loss'" in printed and "'accuracy'" in printed


@pytest.mark.tf
def test_monitor_watches_a_run_in_another_process_and_draws_its_report(tmp_path):
    run_dir = str(tmp_path / "run")
    notebook = execute(
        "monitor.ipynb",
        tmp_path,
        run_dir=run_dir,
        start_demo_run=True,
        epochs=2,
        steps_per_epoch=10,
        watch_seconds=150,
    )
    printed = text_of(notebook)
    assert "stopped watching: COMPLETED" in printed, printed
    assert "COMPLETED" in printed.split("stopped watching")[1]  # colab-resume status
    assert "session 1: completed at step 20" in printed
    assert len(pngs(notebook)) == 1

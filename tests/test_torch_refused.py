"""Keras on a backend the agent does not drive is refused by name, up front.

``KERAS_BACKEND=torch`` used to take the lease and crash (or, without
TensorFlow, say to install it). Now ``cr.Agent(...)`` refuses before
anything is written: ``fit``, ``run`` and the lighter path all start there.

Two real interpreters: build/venv-torch (``make suite`` builds it: the CPU
torch wheel and Keras, no TensorFlow, no JAX), where Keras is imported with
the torch backend; and this suite's own (TensorFlow installed), where
``KERAS_BACKEND=torch`` names the backend before Keras is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.processes import ROOT

TORCH_PYTHON = os.environ.get("COLAB_RESUME_TORCH_PYTHON")

SCRIPT = """
import os, sys
import colab_resume as cr
if sys.argv[2] == "import-keras-first":
    import keras
    assert keras.backend.backend() == "torch", keras.backend.backend()
try:
    cr.Agent(sys.argv[1], save_every_steps=1)
except cr.UnsupportedBackendError as exc:
    print("REFUSED:", exc)
    sys.exit(3)
print("NOT REFUSED")
"""


def refused(python: str, run_dir: str, how: str) -> str:
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONPATH=ROOT)
    done = subprocess.run(
        [python, "-c", SCRIPT, run_dir, how],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 3, (done.stdout, done.stderr[-3000:])
    assert not os.path.exists(run_dir), os.listdir(run_dir)  # nothing written
    return done.stdout


@pytest.mark.skipif(
    not TORCH_PYTHON, reason="needs build/venv-torch (make suite sets it up)"
)
def test_torch_keras_is_refused_by_name_where_torch_is_installed(tmp_path) -> None:
    assert TORCH_PYTHON is not None
    said = refused(TORCH_PYTHON, str(tmp_path / "run"), "import-keras-first")
    assert "Keras uses the 'torch' backend" in said
    assert "'tensorflow' and 'jax' only" in said
    assert "os.environ['KERAS_BACKEND'] = 'jax'" in said


def test_keras_backend_torch_is_refused_where_tensorflow_is_installed(
    tmp_path,
) -> None:
    said = refused(sys.executable, str(tmp_path / "run"), "agent-first")
    assert "Keras uses the 'torch' backend (KERAS_BACKEND=torch)" in said

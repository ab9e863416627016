"""Colab's TPU runtime as JAX sees it: the backend chosen, the TPU diagnosed.

No TPU exists here: the machine is made to look like a Colab TPU VM by its
environment (``COLAB_TPU_1VM``, ``TPU_ACCELERATOR_TYPE``), and JAX, finding
no TPU, uses the CPU, as it does on a real TPU VM whose TPU is taken or
whose jax lacks libtpu. The process holding libtpu's lock is real.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.processes import ROOT as REPO

TPU_VM = {"COLAB_TPU_1VM": "1", "TPU_ACCELERATOR_TYPE": "v5litepod-1"}
LOCK_HOLDER = """
import fcntl, sys, time
f = open(sys.argv[1], "a+")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as libtpu does
print("READY", flush=True)
time.sleep(120)
"""


def test_keras_gets_jax_where_only_jax_is_installed(tmp_path: str) -> None:
    """No KERAS_BACKEND, no keras.json: Keras would try TensorFlow and fail."""
    env = dict(os.environ, PYTHONPATH=REPO, HOME=str(tmp_path))
    env.pop("KERAS_BACKEND", None)
    env.pop("KERAS_HOME", None)
    code = (
        "import sys, colab_resume, keras\n"
        "print(keras.backend.backend(), 'tensorflow' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["jax", "False"]


def test_a_chosen_backend_is_left_alone(tmp_path: str) -> None:
    os.makedirs(os.path.join(tmp_path, ".keras"))
    with open(os.path.join(tmp_path, ".keras", "keras.json"), "w") as f:
        f.write('{"backend": "numpy"}')
    env = dict(os.environ, PYTHONPATH=REPO, HOME=str(tmp_path))
    env.pop("KERAS_BACKEND", None)
    code = "import os, colab_resume\nprint(os.environ.get('KERAS_BACKEND'))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env
    )
    assert done.stdout.split()[-1] == "None", done.stderr[-3000:]


@pytest.fixture
def lock_path(tmp_path: str) -> str:
    return os.path.join(tmp_path, "libtpu_lockfile")


def connect_on_tpu_vm(lock_path: str) -> BaseException:
    from colab_resume.backend.accelerator import Accelerator, Platform
    from colab_resume.runtime import ConnectOptions

    platform = Platform(env=TPU_VM, lock_path=lock_path, set_precision=lambda p: None)
    with pytest.raises(Exception) as raised:
        Accelerator(ConnectOptions(prefer="auto"), platform=platform).connect()
    return raised.value


def test_tpu_held_by_another_process_is_named(lock_path: str) -> None:
    from colab_resume.runtime import TPUInUseError

    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, lock_path],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "READY"
        error = connect_on_tpu_vm(lock_path)
    finally:
        holder.kill()
        holder.wait()
    assert isinstance(error, TPUInUseError), error
    assert f"pid {holder.pid}" in str(error) and f"kill {holder.pid}" in str(error)


def test_jax_without_libtpu_on_a_tpu_vm_says_so(lock_path: str) -> None:
    """Nobody holds the lock; this jax[cpu] has no libtpu."""
    from colab_resume.runtime import TPUSupportMissingError

    error = connect_on_tpu_vm(lock_path)
    assert isinstance(error, TPUSupportMissingError), error
    assert "jax[tpu]" in str(error) and "prefer='cpu'" in str(error)

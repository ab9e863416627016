"""What the JAX tests (``tests/on_jax``, run in build/venv-jax) share: their
worker scripts and code snippets in fresh interpreters.

    done = backend_worker(run_dir, out, "--kill-at-step", "10")
    weights, result = read_out(out)          # support.processes
    done = run_python("import colab_resume", run_dir)
"""

from __future__ import annotations

import os
import subprocess
import sys

from support.processes import ROOT, TESTS, python_path

ON_JAX = os.path.join(TESTS, "on_jax")


def jax_worker(
    name: str, *args: str, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    """``tests/on_jax/NAME.py ARGS`` in a fresh process, awaited (240 s at
    most); ``python`` is another interpreter (the main virtualenv's)."""
    env = dict(os.environ, PYTHONPATH=python_path())
    env.pop("XLA_FLAGS", None)  # the agent sets the device count itself
    return subprocess.run(
        [python, os.path.join(ON_JAX, f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )


def backend_worker(
    run_dir: str, out: str, *args: str, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    """``backend_worker.py`` in a fresh process (JAX here unless told)."""
    return jax_worker("backend_worker", run_dir, out, *args, python=python)


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS`` on JAX, this tree's ``colab_resume`` importable."""
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )

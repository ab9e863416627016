"""The JAX tests run only in the virtualenv without TensorFlow (``make jax-test``).

There, "the JAX path never imports TensorFlow" is proven by TensorFlow not
being installed at all. In the main virtualenv (TensorFlow, no JAX) this
folder is not collected.
"""

from __future__ import annotations

import importlib.util
import os

_HERE_IS_JAX_VENV = (
    importlib.util.find_spec("jax") is not None
    and importlib.util.find_spec("tensorflow") is None
)

# Not collected outside build/venv-jax: `make jax-test` runs them there.
collect_ignore_glob = [] if _HERE_IS_JAX_VENV else ["test_*.py", "*_worker.py"]

if _HERE_IS_JAX_VENV:
    os.environ["KERAS_BACKEND"] = "jax"  # for the in-process tests, before Keras

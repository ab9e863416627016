"""The Keras backend of this process, asked without importing TensorFlow."""

from __future__ import annotations

import os
import sys


def name() -> str:
    """``"tensorflow"``, ``"jax"``, ``"torch"``...: the backend Keras uses.

    Keras reads ``KERAS_BACKEND`` (then ``~/.keras/keras.json``) once, at
    import; once it is imported, its answer is the truth. Before that the
    environment decides, so asking never imports Keras or a framework.
    """
    keras = sys.modules.get("keras")
    backend = getattr(getattr(keras, "backend", None), "backend", None)
    if callable(backend):
        return str(backend())
    return os.environ.get("KERAS_BACKEND", "") or _configured()


def is_jax() -> bool:
    """True when Keras trains with JAX (the TensorFlow path is not taken)."""
    return name() == "jax"


def _configured() -> str:
    import json

    home = os.environ.get("KERAS_HOME") or os.path.join(
        os.path.expanduser("~"), ".keras"
    )
    try:
        with open(os.path.join(home, "keras.json")) as f:
            configured = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        configured = None
    return str(configured or "tensorflow")

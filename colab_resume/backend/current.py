"""The Keras backend of this process, asked without importing TensorFlow."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from colab_resume.errors import ColabResumeError

# Annotations only: asking the backend's name (the CLI does) imports
# nothing more than this module.
if TYPE_CHECKING:
    from colab_resume.backend.base import Backend

_chosen: dict[str, Backend] = {}

# The Keras backends the agent drives; any other is refused by name.
SUPPORTED = ("tensorflow", "jax")


class UnsupportedBackendError(ColabResumeError, RuntimeError):
    """Keras uses a backend the agent does not drive (``torch``, ``numpy``...)."""


def check_supported() -> str:
    """The backend Keras uses, if the agent drives it.

    Asked before anything is written to the run directory: a backend the
    agent cannot checkpoint must not take the lease and then fail.

    Raises:
        UnsupportedBackendError: it is another; the message names it, where
            it came from, the supported ones and the fix.
    """
    chosen = name()
    if chosen in SUPPORTED:
        return chosen
    raise UnsupportedBackendError(
        f"Keras uses the {chosen!r} backend ({_where_chosen()}); colab_resume "
        f"trains on {' and '.join(map(repr, SUPPORTED))} only. Set the backend "
        f"before Keras is imported: os.environ['KERAS_BACKEND'] = 'jax' (a TPU, "
        f"or any machine with JAX) or 'tensorflow' (a GPU with TensorFlow) in "
        f"the first cell, then restart the runtime (Keras reads it once, at "
        f"import). Nothing was written to the run directory."
    )


def _where_chosen() -> str:
    if "keras" in sys.modules:
        return "Keras is already imported with it"
    if os.environ.get("KERAS_BACKEND"):
        return f"KERAS_BACKEND={os.environ['KERAS_BACKEND']}"
    return "from ~/.keras/keras.json"


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


def current() -> Backend:
    """The :class:`~colab_resume.backend.base.Backend` Keras trains with.

    Chosen once per backend name, like Keras' own backend: a process asks
    the same instance every time.

    Raises:
        UnsupportedBackendError: Keras uses neither TensorFlow nor JAX.
    """
    which = check_supported()
    chosen = _chosen.get(which)
    if chosen is None:
        if which == "jax":
            from colab_resume.backend.jax import JaxBackend

            chosen = JaxBackend()
        else:
            from colab_resume.backend.tensorflow import TensorFlowBackend

            chosen = TensorFlowBackend()
        chosen = _chosen.setdefault(which, chosen)
    return chosen


def _configured() -> str:
    return _from_keras_json() or "tensorflow"


def _from_keras_json() -> str | None:
    import json

    home = os.environ.get("KERAS_HOME") or os.path.join(
        os.path.expanduser("~"), ".keras"
    )
    try:
        with open(os.path.join(home, "keras.json")) as f:
            configured = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        configured = None
    return str(configured) if configured else None


def choose_jax_where_tensorflow_is_absent() -> bool:
    """Set ``KERAS_BACKEND=jax`` when nothing chose and only JAX is installed.

    Keras defaults to TensorFlow and, without it, fails at ``import keras``.
    Colab's TPU runtime ships JAX and libtpu but no TensorFlow (since March
    2025), so there the right backend is the one that is installed. Nothing
    is changed when ``KERAS_BACKEND`` is set, Keras is already imported,
    ``keras.json`` names a backend, or TensorFlow is installed. Looks for
    the modules without importing them.

    Returns:
        Whether it set ``KERAS_BACKEND``.
    """
    import importlib.util

    if (
        os.environ.get("KERAS_BACKEND")
        or "keras" in sys.modules
        or _from_keras_json()
        or importlib.util.find_spec("tensorflow") is not None
        or importlib.util.find_spec("jax") is None
    ):
        return False
    os.environ["KERAS_BACKEND"] = "jax"
    return True

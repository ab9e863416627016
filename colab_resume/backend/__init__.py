"""Which Keras backend trains, and what only that backend knows.

:func:`current` returns the process' :class:`Backend`; the agent, the data
path and the checkpoints ask it instead of branching on the framework.
TensorFlow's answers live in :mod:`colab_resume.backend.tensorflow`, JAX's
in :mod:`colab_resume.backend.jax`, which never imports TensorFlow.
"""

from colab_resume.backend.base import Backend
from colab_resume.backend.current import current, is_jax, name

__all__ = ["Backend", "current", "is_jax", "name"]

"""Which Keras backend trains, and what only that backend knows.

The TensorFlow path keeps its code where it always was (``runtime``,
``checkpoint.state``); the JAX path lives in :mod:`colab_resume.backend.jax`
and never imports TensorFlow.
"""

from colab_resume.backend.current import is_jax, name

__all__ = ["is_jax", "name"]

"""Keras' global state: its dtype policy and its session, set and reset.

Which policy to use is :mod:`colab_resume.runtime.precision`'s decision;
this module carries it out on the Keras there is (Keras 3, or the Keras 2
inside TensorFlow 2.15 and older where no Keras 3 is installed), and
remembers the policy object it set by its own choice, so that only a
different, non-default one counts as the user's.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, cast

from colab_resume.runtime.precision import DEFAULT_POLICY

# The global policy object apply_policy set last (empty: none, or a kept one).
_chosen: list[Any] = []


def _keras() -> ModuleType:
    try:
        import keras

        return cast(ModuleType, keras)
    except ImportError:  # TF 2.15 and older carry Keras 2 inside
        import tensorflow as tf

        return cast(ModuleType, tf.keras)


def user_policy() -> str | None:
    """The global policy's name if the user set it, else None.

    A policy counts as the user's when it is not Keras' default and not the
    one :func:`apply_policy` set (a previous connect's choice).
    """
    current = _keras().mixed_precision.global_policy()
    if current.name == DEFAULT_POLICY or any(current is p for p in _chosen):
        return None
    return str(current.name)


def apply_policy(policy: str) -> None:
    """Make ``policy`` Keras' global dtype policy, as this package's choice."""
    mixed = _keras().mixed_precision
    mixed.set_global_policy(policy)
    _chosen[:] = [mixed.global_policy()]


def keep_policy(policy: str) -> None:
    """Make the user's ``policy`` global again (after ``clear_session``).

    Unlike :func:`apply_policy` it stays the user's, so a later connect
    with ``precision="auto"`` keeps it too.
    """
    _keras().mixed_precision.set_global_policy(policy)
    _chosen.clear()


def clear_session() -> None:
    """Reset Keras' global state before rebuilding after an accelerator loss.

    ``keras.backend.clear_session()`` drops the layer-name counters (so the
    rebuilt model gets the same layer and variable names as the first one,
    which checkpoints are matched by), resets TensorFlow's default graph,
    clears the eager kernel cache (kernels compiled for the dead devices)
    and garbage-collects the old model, optimizer and datasets that still
    hold handles to the lost TPU. It also resets the global dtype policy,
    which is why ``reconnect`` sets the policy again afterwards.
    """
    _keras().backend.clear_session()

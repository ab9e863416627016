"""The Keras precision policy, and resetting Keras' global state.

``precision="auto"`` means ``mixed_bfloat16`` on TPU (the format TPUs are
built for: same range as float32, no loss scaling) and ``float32`` on GPU
and CPU. ``mixed_float16`` is faster on GPUs with compute capability >= 7.0
but needs loss scaling: Keras' ``fit`` adds it, a custom training loop must
do it by hand, and forgetting it silently ruins training. So it is never
chosen for you; ask for it explicitly.

In every case the policy is set, ``float32`` included, so a previous
policy in the process (from another connect, or a test) cannot leak in.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import cast

log = logging.getLogger(__name__)

# Below this compute capability GPUs have no float16 tensor cores.
FLOAT16_MIN_COMPUTE_CAPABILITY = (7, 0)


def resolve_precision(precision: str, kind: str) -> str:
    """The Keras policy name for ``precision`` on an accelerator ``kind``.

    Args:
        precision: ``"auto"`` or a policy name (already validated).
        kind: ``"tpu"``, ``"gpu"`` or ``"cpu"``.
    """
    if precision != "auto":
        return precision
    return "mixed_bfloat16" if kind == "tpu" else "float32"


def _keras() -> ModuleType:
    try:
        import keras

        return cast(ModuleType, keras)
    except ImportError:  # TF 2.15 and older carry Keras 2 inside
        import tensorflow as tf

        return cast(ModuleType, tf.keras)


def apply_policy(policy: str) -> None:
    """Make ``policy`` Keras' global dtype policy."""
    _keras().mixed_precision.set_global_policy(policy)


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

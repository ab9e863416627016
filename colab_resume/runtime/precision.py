"""Which Keras precision policy to train with (setting it is the backend's).

``precision="auto"`` means ``mixed_bfloat16`` on TPU (the format TPUs are
built for: same range as float32, no loss scaling) and ``float32`` on GPU
and CPU. ``mixed_float16`` is faster on GPUs with compute capability >= 7.0
but needs loss scaling: Keras' ``fit`` adds it, a custom training loop must
do it by hand, and forgetting it silently ruins training. So it is never
chosen for you; ask for it explicitly.

A policy the user set before connecting
(``keras.mixed_precision.set_global_policy("mixed_bfloat16")``) is theirs:
``"auto"`` keeps it, an explicit ``precision`` replaces it, and either says
so in one line. Otherwise the policy is set, ``float32`` included, so a
policy an earlier connect chose (or a test) cannot leak in: this module
remembers the policy object it set by its own choice, and only a different,
non-default one counts as the user's
(:mod:`colab_resume.backend.keras_state` sets and reads it).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# Below this compute capability GPUs have no float16 tensor cores.
FLOAT16_MIN_COMPUTE_CAPABILITY = (7, 0)

# Keras' policy when nobody set one.
DEFAULT_POLICY = "float32"


def resolve_precision(precision: str, kind: str, users: str | None = None) -> str:
    """The Keras policy name for ``precision`` on an accelerator ``kind``.

    Args:
        precision: ``"auto"`` or a policy name (already validated).
        kind: ``"tpu"``, ``"gpu"`` or ``"cpu"``.
        users: the policy the user set before connecting
            (:func:`user_policy`), which ``"auto"`` keeps.
    """
    if precision != "auto":
        return precision
    if users is not None:
        return users
    return auto_choice(kind)


def auto_choice(kind: str) -> str:
    """What ``"auto"`` picks on ``kind`` when the user set no policy."""
    return "mixed_bfloat16" if kind == "tpu" else DEFAULT_POLICY


def describe_choice(
    precision: str, kind: str, users: str | None, policy: str
) -> str | None:
    """One line saying the policy connecting sets differs from the one before.

    Args:
        precision: what was asked for (``"auto"`` or a policy name).
        kind: the accelerator connected to.
        users: the policy the user had set, or None.
        policy: the policy now set.

    Returns:
        What was kept or changed and how to get the other, or None when
        nothing the user would notice changed.
    """
    if users is not None and policy == users:
        if precision != "auto":
            return None  # asked for what was already set
        choice = auto_choice(kind)
        return (
            f"precision='auto' keeps the global policy {users} set before "
            f"connecting (keras.mixed_precision.set_global_policy); pass "
            f"precision={choice!r} for what 'auto' picks on the {kind.upper()}."
        )
    if users is not None:
        return (
            f"precision={precision!r} replaces the global policy {users} set "
            f"before connecting; pass precision='auto' (or {users!r}) to keep it."
        )
    if policy != DEFAULT_POLICY and precision == "auto":
        return (
            f"precision='auto' set Keras' global policy to {policy} on the "
            f"{kind.upper()} (it was {DEFAULT_POLICY}); pass "
            f"precision={DEFAULT_POLICY!r} to keep {DEFAULT_POLICY}."
        )
    return None

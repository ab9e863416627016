"""Spot legacy stateful TensorFlow random ops in the traced training step.

``tf.random.normal`` / ``uniform`` / ``shuffle`` (and the other stateful
random ops) keep their state inside the op kernel: no checkpoint can reach
it. Seeded, they repeat within one process, but a resumed process starts
their hidden counters again, so a resumed run draws other numbers than an
uninterrupted one and diverges silently. Keras's own layers (Dropout,
``keras.random`` with a ``SeedGenerator``) and ``tf.random.Generator`` keep
their state in variables, which the checkpoint holds.

:class:`RandomOpWatch` listens to op creation while the training step is
traced (the first step of each session) and names what it saw. It uses
TensorFlow's op-callback hook, the one ``tf.debugging`` builds on.

The hook is thread-local: it sees the ops of the thread that opened the
watch, and of the threads handed that thread's callbacks. That is how a
``MirroredStrategy`` (``cpu_replicas``, several GPUs) traces the step: once
per replica, each in a replica thread of its own that starts with the
callbacks of the thread calling ``strategy.run``. So the watch counts what
every thread it reaches traces; one that kept to the thread that opened it
would see nothing under such a strategy.
"""

from __future__ import annotations

import re
from typing import Any

STATEFUL_RANDOM_OPS = frozenset(
    {
        "RandomStandardNormal",
        "RandomUniform",
        "RandomUniformInt",
        "TruncatedNormal",
        "ParameterizedTruncatedNormal",
        "Multinomial",
        "RandomGamma",
        "RandomPoisson",
        "RandomPoissonV2",
        "RandomShuffle",
    }
)

FIX = (
    "draw random numbers with keras.random.* and a keras.random.SeedGenerator "
    "kept on the layer or model (or with a tf.random.Generator kept there), "
    "whose state the checkpoint holds"
)

# The name scope a MirroredStrategy gives replica 1, 2 ... (replica 0 has none).
_REPLICA_SCOPE = re.compile(r"^replica_\d+/")


class RandomOpWatch:
    """Collects the stateful random ops created in graphs while it is open.

    Args:
        hooks: TensorFlow's op-callback registry (``add_op_callback`` and
            ``remove_op_callback``), handed in by the TensorFlow backend; None
            watches nothing (a TensorFlow without the hook).
    """

    def __init__(self, hooks: Any = None) -> None:
        self.found: list[str] = []
        self._hooks = hooks
        self._callbacks: Any = None

    def _seen(
        self,
        op_type: str,
        inputs: Any,
        attrs: Any,
        outputs: Any,
        op_name: str | None = None,
        graph: Any = None,
    ) -> None:
        # Traced into a graph (the step's), by this thread or by a replica
        # thread it handed its callbacks to (see the module docstring).
        if graph is not None and op_type in STATEFUL_RANDOM_OPS:
            # One name per op of the step, not one per replica.
            name = _REPLICA_SCOPE.sub("", op_name or "")
            self.found.append(f"{op_type} ({name})")

    def __enter__(self) -> RandomOpWatch:
        if self._hooks is None:
            return self
        self._callbacks = self._hooks
        self._hooks.add_op_callback(self._seen)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._callbacks is not None:
            self._callbacks.remove_op_callback(self._seen)
            self._callbacks = None

    def warning(self) -> str | None:
        """One line naming what was found, or None."""
        if not self.found:
            return None
        names = sorted(set(self.found))
        return (
            f"the training step uses stateful TensorFlow random ops, whose state "
            f"no checkpoint can hold, so a resumed run draws other numbers than "
            f"an uninterrupted one: {', '.join(names[:5])}"
            f"{' ...' if len(names) > 5 else ''}. To resume exactly, {FIX}."
        )

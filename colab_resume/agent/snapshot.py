"""What a driver hands the outer loop to save: one checkpoint's contents.

Below both the per-step duties (:mod:`colab_resume.agent.steps`, which
save it) and the driver protocol (:mod:`colab_resume.agent.driver`, whose
drivers return it), so that neither imports the other for it.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Snapshot(NamedTuple):
    """What one checkpoint saves.

    Attributes:
        state: what :class:`~colab_resume.checkpoint.CheckpointManager`
            writes (a model, a model with extra groups, or a dict of
            trackables).
        epoch: the epoch of the step saved.
        metrics: JSON-able metrics for the manifest.
        extras: JSON-able driver values (History, fingerprints, callback
            state...).
        setup_seconds: what taking it cost that a save pays once an epoch
            whatever the cadence (the epoch's data fingerprint), for
            ``save_every="auto"``, which prices a save without it.
    """

    state: Any
    epoch: int
    metrics: dict[str, Any]
    extras: dict[str, Any]
    setup_seconds: float = 0.0

"""The seam between the outer loop and what it trains.

:class:`~colab_resume.agent.loop.RunLoop` owns time and failure (leases,
recovery, the final commit); a :class:`Driver` owns the model: it builds it
inside the strategy scope the loop opened, takes what a checkpoint carried,
says what to save, and trains from a step. ``agent.fit``
(:class:`~colab_resume.agent.keras_fit.KerasFit`), ``agent.run``
(:class:`~colab_resume.agent.custom_loop.CustomLoop`) and the lighter path
(:class:`~colab_resume.agent.callback.ModelState`) implement it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

# Annotations only, never imported at run time: the two modules name
# each other's types without an import cycle.
if TYPE_CHECKING:
    from colab_resume.agent.steps import StepDuties
    from colab_resume.checkpoint import RestoredInfo


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


class Driver(Protocol):
    """What the outer loop needs from a way of training."""

    @property
    def total_steps(self) -> int | None:
        """Steps of the whole run (None: the lighter path, not known up front)."""
        ...

    @property
    def steps_per_epoch(self) -> int | None: ...

    @property
    def state(self) -> Any:
        """What checkpoints hold; valid after :meth:`build`."""
        ...

    def build(self) -> None:
        """Build the model (the loop has entered a fresh strategy scope)."""
        ...

    def restored(self, info: RestoredInfo | None) -> int:
        """Take what the restored checkpoint carried; return the step to start at."""
        ...

    def snapshot(self) -> Snapshot:
        """What to save now (called at every save)."""
        ...

    def metrics(self) -> dict[str, Any]:
        """The latest metrics as floats (cheap: the once-a-second tick reads it)."""
        ...

    def train(self, start_step: int, duties: StepDuties, strategy: Any) -> None:
        """Train from ``start_step`` to the end, calling ``duties`` every step."""
        ...

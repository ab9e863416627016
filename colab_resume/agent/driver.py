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

from typing import TYPE_CHECKING, Any, Protocol

from colab_resume.agent.snapshot import Snapshot
from colab_resume.agent.steps import StepDuties

if TYPE_CHECKING:  # annotations only: the checkpoints load no more than needed
    from colab_resume.checkpoint import RestoredInfo

__all__ = ["Driver", "Snapshot"]


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

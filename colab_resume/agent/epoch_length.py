"""The epoch length a run's checkpoints were saved with, checked on resume.

A checkpoint records a global step; the drivers split it into an epoch and
a position in it with ``steps_per_epoch``. Under another epoch length the
same step names another epoch: a run resumed with one would silently train
a different number of epochs than asked (and end with a History that does
not match ``epochs``). So every checkpoint records the length, and a resume
with a different one is refused with the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from colab_resume.errors import RunMismatchError

if TYPE_CHECKING:
    from colab_resume.agent.driver import Snapshot
    from colab_resume.checkpoint import RestoredInfo

KEY = "steps_per_epoch"


class EpochLengthChangedError(RunMismatchError, ValueError):
    """``steps_per_epoch`` is not the one the run's checkpoints were saved with."""


def stamp(snapshot: Snapshot, steps_per_epoch: int | None) -> Snapshot:
    """``snapshot`` with the epoch length among its extras (None: not known)."""
    if steps_per_epoch is None:
        return snapshot
    return snapshot._replace(extras={**snapshot.extras, KEY: steps_per_epoch})


def check(info: RestoredInfo | None, steps_per_epoch: int | None) -> None:
    """Refuse to resume ``info`` under another epoch length.

    Checkpoints from before the length was recorded, and drivers that do
    not know it (the lighter path), pass.

    Raises:
        EpochLengthChangedError: the checkpoint was saved with another one.
    """
    if info is None or steps_per_epoch is None:
        return
    saved = info.extras.get(KEY)
    if not isinstance(saved, int) or isinstance(saved, bool) or saved <= 0:
        return
    if saved == steps_per_epoch:
        return
    raise EpochLengthChangedError(
        f"This run's checkpoints were saved with steps_per_epoch={saved}, and "
        f"this call passes steps_per_epoch={steps_per_epoch}: its step "
        f"{info.step} would fall in another epoch. Pass steps_per_epoch={saved} "
        f"to continue it (change epochs to train longer or shorter), or give "
        f"the new schedule a new run_dir."
    )

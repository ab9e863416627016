"""The run's identity in each tracker (its run id there), kept in the run directory.

A tracker run (an MLflow run id, a W&B run id, a TensorBoard log directory)
must be the same in every session of one training run, and a session can
start on a new machine where nothing local survived. So the identity lives
where the checkpoints do: ``trackers/<name>.json`` in the run directory,
written once, create-only, through the same :class:`~colab_resume.storage.Storage`
as everything else (local disk, Cloud Storage, Drive). Two sessions that
race to create it agree: the loser reads the winner's record and uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from colab_resume.storage import Storage

TRACKERS_DIR = "trackers"


def record_path(name: str) -> str:
    """Where tracker ``name``'s identity lives in the run directory."""
    return f"{TRACKERS_DIR}/{name}.json"


def storage_of(agent: Any) -> Storage:
    """A storage client on ``agent``'s run directory, with its options and retry."""
    return Storage(
        agent.run_dir,
        agent.options.storage_options,
        retry=agent.options.storage_retry,
    )


def read_identity(storage: Storage, name: str) -> dict[str, Any] | None:
    """The identity tracker ``name`` recorded for this run, or None."""
    try:
        return storage.read_json(record_path(name))
    except FileNotFoundError:
        return None


def claim_identity(
    storage: Storage, name: str, make: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """The run's identity for tracker ``name``: the recorded one, else ``make()``'s.

    ``make`` is called only when nothing is recorded yet; what it returns is
    written create-only, so of two sessions racing here one record wins and
    both end with it.

    Returns:
        ``(identity, created)``: ``created`` is True when this call's
        ``make()`` became the record (the tracker run is new), False when
        an earlier session's record is used (the caller discards whatever
        its ``make()`` created, if it was called and lost).
    """
    found = read_identity(storage, name)
    if found is not None:
        return found, False
    made = make()
    try:
        storage.write_json(record_path(name), made, create_only=True)
    except FileExistsError:
        winner = read_identity(storage, name)
        if winner is None:  # created, then deleted under us: ours is as good
            raise
        return winner, False
    return made, True

"""``cr.inspect``: a run's status from anywhere, without TensorFlow."""

from __future__ import annotations

from typing import Any

from colab_resume.heartbeat.liveness import RunStatus, read_status
from colab_resume.storage import Storage


def inspect(
    run_dir: str,
    storage_options: dict[str, Any] | None = None,
    *,
    dead_after_seconds: float | None = None,
) -> RunStatus:
    """Judge a run from its run directory, from anywhere.

    The state is one of NEW, ALIVE, STALLED, DEAD, STOPPED, COMPLETED,
    FAILED (:data:`colab_resume.heartbeat.STATES`).

    Ages come from the storage server's clock, so the verdict does not
    depend on this machine's clock. Never imports TensorFlow.

    Args:
        run_dir: the run directory (``gs://bucket/runs/name`` or a path).
        storage_options: passed to fsspec (``token=``, ``endpoint_url=``).
        dead_after_seconds: override the holder's own dead-after threshold.

    Returns:
        The run's :class:`RunStatus`.

    Raises:
        UnsupportedURLError: the URL's scheme is not one that works.
        BucketNotFoundError: the bucket does not exist.
        NoCredentialsError: no credentials were found.
        PermissionDeniedError: the run directory cannot be read with them.
            Each message says how to fix it.
        RunDirNotFoundError: a local run directory that does not exist (a
            typo: a session creates its run directory).
    """
    storage = Storage(run_dir, storage_options)
    storage.require_run_dir()  # as the CLI: one answer for a missing directory
    return read_status(storage, dead_after_seconds=dead_after_seconds)

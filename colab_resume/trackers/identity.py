"""The run's identity in each tracker (its run id there), kept in the run directory.

A tracker run (an MLflow run id, a W&B run id, a TensorBoard log directory)
must be the same in every session of one training run, and a session can
start on a new machine where nothing local survived. So the identity lives
where the checkpoints do: ``trackers/<name>.json`` in the run directory,
written once, create-only, through the same :class:`~colab_resume.storage.Storage`
as everything else (local disk, Cloud Storage, Drive). Two sessions that
race to create it agree: the loser reads the winner's record and uses it.

A record is data, not an identity to trust: anyone with write access to
the run directory can plant one naming another person's tracker run. So a
session reuses a recorded tracker run only where the tracker itself proves
that it belongs to this training run (a tag holding the run directory's
``run_id``, read back from the tracker) and lies where the caller asked;
otherwise it makes a new one and replaces the record (:func:`replace_identity`),
saying which run it refused and why.

A record keeps only what its readers need and what is known to hold no
secret: ids, and a tracking URI without its userinfo, query or fragment
(:func:`safe_uri`), by construction rather than by recognising a
password's shape.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable
from typing import Any

from colab_resume.protocol import rundir
from colab_resume.storage import Storage

log = logging.getLogger(__name__)

TRACKERS_DIR = rundir.TRACKERS_DIR


def record_path(name: str) -> str:
    """Where tracker ``name``'s identity lives in the run directory."""
    return rundir.tracker_path(name)


def storage_of(agent: Any) -> Storage:
    """A storage client on ``agent``'s run directory, with its options and retry."""
    return Storage(
        agent.run_dir,
        agent.options.storage_options,
        retry=agent.options.storage_retry,
    )


def safe_uri(uri: str) -> str:
    """``uri`` as a record may keep it: scheme, host, port and path only.

    ``https://user:PASSWORD@host:5000/x?token=T#f`` becomes
    ``https://host:5000/x``; a URI without a network location (a local
    path, ``databricks``, ``sqlite:///mlflow.db``) keeps its path and loses
    any query.
    """
    parts = urllib.parse.urlsplit(uri)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # a port that is no number: not kept
        port = None
    netloc = host + (f":{port}" if port is not None else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def run_id_of(storage: Storage) -> str | None:
    """The run directory's ``run_id`` (``run.json``); None before the first
    session wrote it, or where it cannot be read as one."""
    try:
        record = storage.read_json(rundir.RUN_RECORD)
    except (FileNotFoundError, ValueError):
        return None
    value = record.get("run_id") if isinstance(record, dict) else None
    return value if isinstance(value, str) and value else None


def replace_identity(storage: Storage, name: str, record: dict[str, Any]) -> None:
    """Overwrite tracker ``name``'s record: the recorded run was refused."""
    storage.write_json(record_path(name), record)


def replace_refused(
    storage: Storage,
    name: str,
    refused: dict[str, Any],
    why: str,
    make: Callable[[], dict[str, Any]],
    *,
    what: str,
    made: str,
    events: Any,
) -> dict[str, Any]:
    """A new identity in place of ``refused``, a record that is not this run's.

    Records ``make()``'s identity over it and says so by name (a warning and
    a ``tracker.refused`` event).

    Args:
        why: why ``refused`` is not this run's, in words.
        what: the tracker's name for people (``"MLflow"``).
        made: what ``make`` did, in words (``"created"``, ``"drew"``).
        events: the agent's event log.
    """
    record = make()
    replace_identity(storage, name, record)
    said = (
        f"{what}: the recorded {what} run {refused.get('run_id')!r} is not this "
        f"run's ({why}); {made} {what} run {record['run_id']} instead"
    )
    log.warning(said)
    events.emit("tracker.refused", said, level="warning")
    return record


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

"""Which of several same-named Drive folders is the run's folder.

Drive lets a folder's name repeat: one restored from the trash, a copy, a
namesake made by hand. The run is the folder whose files carry a run's
proof (:mod:`colab_resume.storage.drive_proof`) with the newest activity;
the choice is logged with its reason, and when it cannot be told (equal
activity) it is refused with the folder ids and the fix, never guessed.
New folders of a creation race (no files yet) go to the oldest, as every
creator picks.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from typing import Any

from colab_resume.errors import StorageError
from colab_resume.storage import drive_index as index
from colab_resume.storage import drive_proof as proof
from colab_resume.storage.drive_api import DriveApi

log = logging.getLogger(__name__)


class AmbiguousRunFolderError(StorageError):
    """Several folders match the run's path and none can be told to be the run."""


@dataclasses.dataclass
class _Candidate:
    """A folder of the run's name, and what its files say of it."""

    raw: dict[str, Any]
    activity: float | None  # the newest stamp of a file of a run in it
    what: str  # in words, for the log and the refusal

    @property
    def id(self) -> str:
        return str(self.raw["id"])


def choose(
    api: DriveApi, url: str, found: list[dict[str, Any]], timeout: float | None
) -> dict[str, Any] | None:
    """The run folder among ``found`` (folders of the run's name), or None."""
    if len(found) <= 1:
        return found[0] if found else None
    candidates = [_describe(api, url, raw, timeout) for raw in found]
    active = [c for c in candidates if c.activity is not None]
    if not active:  # new folders of a creation race: the oldest
        return index.oldest(found)
    active.sort(key=lambda c: c.activity or 0.0, reverse=True)
    if len(active) > 1 and active[0].activity == active[1].activity:
        listing = "; ".join(f"{c.id}: {c.what}" for c in candidates)
        raise AmbiguousRunFolderError(
            f"{len(found)} Drive folders match {url} and none can be told to "
            f"be the run ({listing}). Name the one to use by id: "
            f"run_dir='gdrive://id:FOLDER_ID', or move the others away."
        )
    chosen = active[0]
    others = "; ".join(f"{c.id}: {c.what}" for c in candidates if c is not chosen)
    log.warning(
        "storage: %d Drive folders match %s; using %s (%s), the newest "
        "activity. The others: %s. To use another, pass "
        "run_dir='gdrive://id:FOLDER_ID'.",
        len(found),
        url,
        chosen.id,
        chosen.what,
        others,
    )
    return chosen.raw


def _describe(
    api: DriveApi, url: str, raw: dict[str, Any], timeout: float | None
) -> _Candidate:
    folder = str(raw["id"])
    run_id = proof.run_of(raw)
    files = api.children(
        f"'{folder}' in parents and trashed = false", proof.FIELDS, timeout=timeout
    )
    if run_id is not None:
        mine = [f for f in files if proof.why_not_ours(f, folder, run_id) is None]
        what = f"run {run_id}, {len(mine)} file(s) of it"
    else:  # legacy: the files its index names, in it
        found = index.oldest([f for f in files if f.get("name") == index.INDEX_NAME])
        named: set[str] = set()
        if found is not None:
            try:
                where = f"{url} (folder {folder})"
                named = set(index.read(api, str(found["id"]), where, timeout).values())
            except index.DamagedIndexError:
                pass
        mine = [f for f in files if f["id"] in named]
        what = f"made before provenance, {len(mine)} file(s) its index names"
    activity = max((index.parse_time(f["modifiedTime"]) for f in mine), default=None)
    if activity is not None:
        stamp = datetime.datetime.fromtimestamp(activity, datetime.timezone.utc)
        what += f", last written {stamp:%Y-%m-%d %H:%M:%S} UTC"
    return _Candidate(raw, activity, what)

"""Provenance on Drive: which files of a run folder the run provably wrote.

A Drive folder is touched by people and programs: the web UI's trash, a
folder copied file by file, a results file dropped in, an edited index.
So no name, listing or index entry is ever enough to make a file the
run's. Every file the run uploads carries, from its first byte, Drive
``appProperties`` (private to the app that set them; they survive renames
and moves, not a copy by another program):

- :data:`RUN_KEY`: the run's id, which the run folder carries too (set
  when the folder is made);
- :data:`PATH_KEY`: the object's path in the run directory.

A file is the run's only when it is a plain file (not a folder, shortcut
or Google-native document) whose parent is the run folder, not in the
trash, and whose proof names this run and the path it is read as
(:func:`why_not_ours`). Nothing else is read as a record, overwritten or
deleted.

Folders made before provenance (no run id on the folder) are *legacy*:
their files are judged by their place and name, as then, until a writing
session stamps them (:mod:`colab_resume.storage.drive_folder`).

Knows nothing of indexes or requests: it judges the metadata it is given.
"""

from __future__ import annotations

import uuid
from typing import Any

RUN_KEY = "colabResumeRun"
PATH_KEY = "colabResumePath"
# What a judgement needs of a file, and the stamps of ObjectInfo.
FIELDS = "id,name,mimeType,trashed,parents,appProperties,size,createdTime,modifiedTime"
_NATIVE = "application/vnd.google-apps."


def new_run_id() -> str:
    """A fresh run id (random: two runs never share one)."""
    return uuid.uuid4().hex


def stamp(run_id: str, rel: str) -> dict[str, str]:
    """The ``appProperties`` an upload of ``rel`` carries."""
    return {RUN_KEY: run_id, PATH_KEY: rel}


def why_not_ours(
    raw: dict[str, Any],
    folder_id: str,
    run_id: str | None,
    rel: str | None = None,
    *,
    trash_ok: bool = False,
) -> str | None:
    """None if ``raw`` is the run's file (of path ``rel`` when given), else why not.

    Args:
        raw: the file's metadata (:data:`FIELDS`).
        folder_id: the run folder.
        run_id: the run's id; None for a legacy folder (judged by name).
        rel: the path the file is read as; None: any path of the run.
        trash_ok: judge a trashed file as if it were not (to restore it).
    """
    if str(raw.get("mimeType", "")).startswith(_NATIVE):
        return "it is a Drive folder, shortcut or document, not a file"
    if folder_id not in (raw.get("parents") or []):
        return "it is not in the run folder"
    props = raw.get("appProperties") or {}
    if run_id is None:
        if props.get(RUN_KEY):
            return "it carries another run's proof"
        if rel is not None and raw.get("name") != rel:
            return f"its name is {raw.get('name')!r}"
    elif props.get(RUN_KEY) != run_id:
        return "it carries no proof that this run wrote it"
    elif rel is not None and props.get(PATH_KEY) != rel:
        return f"its proof names another path ({props.get(PATH_KEY)!r})"
    if raw.get("trashed") and not trash_ok:
        return "it is in the Drive trash"
    return None


def path_of(raw: dict[str, Any]) -> str | None:
    """The path a proven file's proof names."""
    value = (raw.get("appProperties") or {}).get(PATH_KEY)
    return str(value) if value else None


def run_of(raw: dict[str, Any]) -> str | None:
    """The run id a folder (or file) carries; None for none."""
    value = (raw.get("appProperties") or {}).get(RUN_KEY)
    return str(value) if value else None

"""Shared objects in the run directory: upload once, verify before a commit,
delete once no kept checkpoint references them.

The objects (``objects/<sha256>.safetensors``, :mod:`colab_resume.protocol.objects`)
hold the arrays of a fine-tune that no training step changes. Three rules:

- an object is uploaded only where the run directory does not list one of
  its name, size and (where the store keeps one) CRC32C already: the same
  arrays make the same file, so a later session finds it stored;
- a commit references only objects the run directory lists as they were
  written (:func:`check_stored`, right before the manifest);
- retention deletes an object only once no committed checkpoint's manifest
  references it (:func:`unreferenced`), after the checkpoints themselves:
  a kill at any point leaves at worst an unreferenced object, or what a
  killed upload left that is not an object, which the next collection
  removes. An unreadable manifest stops the collection (its references
  are unknown), never a checkpoint's restore.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from colab_resume.checkpoint.errors import CheckpointError
from colab_resume.checkpoint.fetch import Damaged, read_manifest
from colab_resume.checkpoint.formats.base import ObjectFile
from colab_resume.protocol.listing import RunListing
from colab_resume.protocol.objects import (
    OBJECT_DIR,
    SharedObjects,
    is_object_name,
    object_path,
)
from colab_resume.storage import ObjectInfo, Storage

__all__ = [
    "OBJECT_DIR",
    "MissingObjectError",
    "check_stored",
    "collect",
    "listed",
    "object_path",
    "to_upload",
    "unreferenced",
]


class MissingObjectError(CheckpointError):
    """An object a commit would reference is not in the run directory as written."""


def listed(storage: Storage) -> dict[str, ObjectInfo]:
    """Object name -> its listing, for every well-named object (one listing)."""
    found = {}
    for info in storage.list(OBJECT_DIR + "/"):
        name = info.path[len(OBJECT_DIR) + 1 :]
        if is_object_name(name):
            found[name] = info
    return found


def _matches(info: ObjectInfo | None, size: int, crc32c: str) -> bool:
    return (
        info is not None
        and info.size == size
        and (info.crc32c is None or info.crc32c == crc32c)
    )


def to_upload(storage: Storage, files: Sequence[ObjectFile]) -> list[tuple[str, str]]:
    """``(local path, run path)`` of the objects the run directory lacks.

    A stored object of the same name, size and CRC32C is the same bytes
    (the name is their SHA-256): not uploaded again, and its local copy
    deleted. One found damaged at restore is uploaded whatever is listed.
    """
    if not files:
        return []
    present = listed(storage)
    uploads = []
    for item in files:
        entry = item.entry
        if not item.rewrite and _matches(
            present.get(entry.name), entry.size, entry.crc32c
        ):
            os.remove(item.local_path)
            continue
        uploads.append((item.local_path, object_path(entry.name)))
    return uploads


def check_stored(storage: Storage, shared: SharedObjects) -> None:
    """Check that every object ``shared`` lists is stored as listed.

    Raises:
        MissingObjectError: one is missing, or of another size or CRC32C.
    """
    present = listed(storage)
    wrong = [
        entry.name
        for entry in shared.files
        if not _matches(present.get(entry.name), entry.size, entry.crc32c)
    ]
    if wrong:
        raise MissingObjectError(
            f"{storage.url}/{OBJECT_DIR}/ lacks {len(wrong)} shared object(s) this "
            f"checkpoint references, or holds other bytes under their names: "
            f"{', '.join(wrong)}; the next save writes them again."
        )


def unreferenced(storage: Storage, listing: RunListing) -> list[str] | None:
    """The objects no committed checkpoint of ``listing`` references.

    Returns:
        Their names, or None when a committed manifest cannot be read (its
        references are unknown: nothing may be deleted).
    """
    present = listed(storage)
    if not present:
        return []
    used: set[str] = set()
    for entry in listing.committed:
        try:
            manifest = read_manifest(storage, entry)
        except (Damaged, FileNotFoundError):
            return None
        if manifest.objects is not None:
            used.update(f.name for f in manifest.objects.files)
    return sorted(set(present) - used)


def collect(
    storage: Storage, fence: Callable[[], None] | None = None
) -> tuple[list[str], bool]:
    """Delete the objects no committed checkpoint references.

    Call it after the checkpoints retention deletes are gone, and only
    where no session is writing a checkpoint (the holder itself, between
    its uploads, or ``prune`` on a run nobody holds): an object uploaded for
    a checkpoint not yet committed is unreferenced too.

    Args:
        fence: called before the deletions (the holder's fence check).

    Returns:
        The object paths deleted, and whether every manifest could be read.
    """
    if not listed(storage) and not storage.leftovers(OBJECT_DIR):
        return [], True  # the common case: a run with no shared objects
    doomed = unreferenced(storage, RunListing.read(storage))
    if doomed is None:
        return [], False
    if fence is not None:
        fence()
    for name in doomed:
        storage.delete(object_path(name))
    # What a killed upload of an object left (a local temporary file, a
    # Drive upload never named in the index): no writer is uploading now.
    storage.remove_leftovers(OBJECT_DIR)
    return [object_path(name) for name in doomed], True

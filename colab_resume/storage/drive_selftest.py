"""What a gdrive:// run directory relies on of Drive beyond any store's needs.

Checks for ``colab-resume selftest`` (:mod:`colab_resume.cli.selftest`):
each takes the scratch run directory and returns a detail (or raises).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from colab_resume.storage import drive_proof as proof
from colab_resume.storage.drive import DriveStore
from colab_resume.storage.store import Storage


class Scratch(Protocol):
    """The scratch run directory a check works in."""

    @property
    def storage(self) -> Storage: ...

    def another_session(self) -> Storage: ...


def _store(scratch: Scratch) -> DriveStore:
    store = scratch.storage.store
    assert isinstance(store, DriveStore)
    store._run_folder(create=True, timeout=60)
    return store


def _file_of(scratch: Scratch, rel: str) -> tuple[DriveStore, str]:
    scratch.storage.write_bytes(rel, b"{}")
    store = _store(scratch)
    file_id = store.folder.lookup(rel, 60)
    assert file_id is not None, f"{rel} is not in the index"
    return store, file_id


def _stale_if_match(scratch: Scratch) -> str:
    store = _store(scratch)
    index = store.folder.index_id
    assert index is not None
    etag = store.api.etag(index, timeout=60)
    entries = store.folder.read(60)
    store.folder.update(lambda e: {**e, "probe": "x"}, 60)  # a new etag
    store.folder.update(lambda e: {k: v for k, v in e.items() if k != "probe"}, 60)
    body = json.dumps({"format": 2, "files": entries}).encode()
    assert not store.api.replace_if_match(index, body, etag, timeout=60), (
        "Drive accepted an update with a stale If-Match: two sessions could both "
        "take one lease"
    )
    return "412"


def _app_properties(scratch: Scratch) -> str:
    store, file_id = _file_of(scratch, "proof.json")
    raw: dict[str, Any] = store.api.get(file_id, proof.FIELDS, timeout=60)
    assert proof.run_of(raw) == store.folder.run_id, f"came back as {raw!r}"
    assert proof.path_of(raw) == "proof.json", f"came back as {raw!r}"
    return ""


def _trash(scratch: Scratch) -> str:
    store, file_id = _file_of(scratch, "trashed.json")
    store.api.update_metadata(file_id, trashed=True, timeout=60)
    listed = store.api.children(
        f"'{store.folder.folder_id}' in parents and trashed = false",
        "id",
        timeout=60,
    )
    assert file_id not in {item["id"] for item in listed}, "still listed"
    assert scratch.another_session().read_bytes("trashed.json") == b"{}"
    assert store.api.get(file_id, "trashed", timeout=60)["trashed"] is False, (
        "not restored"
    )
    return ""


def _gone_not_trashed(scratch: Scratch) -> str:
    store, file_id = _file_of(scratch, "deleted.json")
    scratch.storage.delete("deleted.json")
    try:
        store.api.get(file_id, "id,trashed", timeout=60)
    except FileNotFoundError:
        return ""
    raise AssertionError("the deleted file still exists (in the trash?)")


CHECKS: list[tuple[str, Callable[[Any], str]]] = [
    ("a conditional update with a stale If-Match is refused", _stale_if_match),
    ("appProperties set with an upload come back (the run's proof)", _app_properties),
    ("a trashed file leaves listings, still reads and is restored", _trash),
    ("a deleted file is gone, not in the trash", _gone_not_trashed),
]

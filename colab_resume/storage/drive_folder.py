"""The run folder of a gdrive:// run directory, and its index.

The folder is found by name below its base folder, one level at a time;
Drive allows several folders (and indexes) of one name, so of several
everyone takes the oldest by ``createdTime`` then id, and a creator whose
own copy lost deletes it (see :mod:`colab_resume.storage.drive`). The
index maps each object's path to its file id; it changes only by a
conditional update (v2 ``If-Match``), re-read and retried on 412.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from colab_resume.storage.drive_api import FOLDER_MIME, DriveApi, DriveHttpError

log = logging.getLogger(__name__)

INDEX_NAME = ".colab-resume-index.json"
# Conditional index updates lost to other writers before giving up (each
# loss means another write landed: progress, not a fault).
_MAX_INDEX_RACES = 200


def parse_time(text: str) -> float:
    """An RFC 3339 time as Drive writes it, in epoch seconds."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def quote(name: str) -> str:
    """A string literal of Drive's query language."""
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _winner(found: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one of several same-named files every reader picks."""
    if not found:
        return None
    return min(found, key=lambda item: (parse_time(item["createdTime"]), item["id"]))


class RunFolder:
    """The run folder's id, its index's id, and the index as last read.

    Args:
        api: the Drive calls.
        url: the run directory, for messages.
        base: the id of the folder the path starts from (``root``: My Drive).
        segments: the folder names below ``base``.
    """

    def __init__(self, api: DriveApi, url: str, base: str, segments: list[str]) -> None:
        self.api, self.url, self.base, self.segments = api, url, base, segments
        self._lock = threading.Lock()
        self._resolving = threading.Lock()
        self.folder_id: str | None = None
        self.index_id: str | None = None
        self._entries: dict[str, str] = {}  # path -> file id, as last read

    def forget(self, rel: str) -> None:
        """Drop a cached id whose file turned out to be gone."""
        with self._lock:
            self._entries.pop(rel, None)

    def resolve(self, *, create: bool, timeout: float | None) -> str | None:
        """The run folder's id; None if it does not exist and ``create`` is false."""
        if self.folder_id is not None:
            return self.folder_id
        with self._resolving:  # one resolution per store, not one per thread
            if self.folder_id is not None:
                return self.folder_id
            return self._resolve(create=create, timeout=timeout)

    def _resolve(self, *, create: bool, timeout: float | None) -> str | None:
        parent = self.base
        for name in self.segments:
            query = (
                f"name = {quote(name)} and {quote(parent)} in parents and "
                f"mimeType = '{FOLDER_MIME}' and trashed = false"
            )
            make = functools.partial(
                self.api.create_folder, name, parent, timeout=timeout
            )
            found = self._settle(query, timeout, create, make)
            if found is None:
                return None
            parent = found
        query = f"name = '{INDEX_NAME}' and {quote(parent)} in parents"
        make = functools.partial(self._new_index, parent, timeout)
        index = self._settle(f"{query} and trashed = false", timeout, create, make)
        if index is None:
            return None
        with self._lock:
            self.folder_id, self.index_id = parent, index
        return parent

    def _new_index(self, folder: str, timeout: float | None) -> str:
        metadata = {
            "name": INDEX_NAME,
            "parents": [folder],
            "mimeType": "application/json",
        }
        return str(self.api.create(metadata, _encode({}), None, timeout=timeout)["id"])

    def _settle(
        self,
        query: str,
        timeout: float | None,
        create: bool,
        make: Callable[[], str],
    ) -> str | None:
        """The id of the oldest file matching ``query``, made if there is none."""
        fields = "id,createdTime"
        chosen = _winner(self.api.children(query, fields, timeout=timeout))
        if chosen is not None:
            return str(chosen["id"])
        if not create:
            return None
        mine = make()
        chosen = _winner(self.api.children(query, fields, timeout=timeout))
        winner = str(chosen["id"]) if chosen is not None else mine
        if winner != mine:
            log.info("storage: another session created %s first; using it", self.url)
            if self._unused(mine, timeout):
                self.api.delete(mine, timeout=timeout)
        return winner

    def _unused(self, file_id: str, timeout: float | None) -> bool:
        """Whether a losing copy is still as made: no children, an empty index.

        Someone who listed before the winner showed up may have taken ours;
        then it stays (a reader takes the winner, and ours is only quota).
        """
        query = f"{quote(file_id)} in parents and trashed = false"
        if self.api.children(query, "id", timeout=timeout):
            return False
        if self.api.get(file_id, "mimeType", timeout=timeout).get("mimeType") == (
            FOLDER_MIME
        ):
            return True
        with self.api.download(file_id, timeout=timeout) as response:
            content = response.content if response.status_code != 416 else b""
        try:
            return not _decode(content)
        except ValueError:
            return False  # not an index we wrote: leave it

    def read(self, timeout: float | None) -> dict[str, str]:
        assert self.index_id is not None
        with self.api.download(self.index_id, timeout=timeout) as response:
            entries = _decode(response.content)
        with self._lock:
            self._entries = dict(entries)
        return entries

    def update(self, change: Any, timeout: float | None) -> dict[str, str]:
        """Apply ``change(entries) -> entries or None`` under If-Match; the result."""
        assert self.index_id is not None
        for _ in range(_MAX_INDEX_RACES):
            etag = self.api.etag(self.index_id, timeout=timeout)
            entries = self.read(timeout)
            changed = change(dict(entries))
            if changed is None:
                return entries
            if self.api.replace_if_match(
                self.index_id, _encode(changed), etag, timeout=timeout
            ):
                with self._lock:
                    self._entries = dict(changed)
                return dict(changed)
            time.sleep(random.uniform(0.0, 0.05))  # lost a race: let it land
        raise DriveHttpError(503, "indexContended", "the run index kept changing")

    def lookup(
        self, rel: str, timeout: float | None, *, fresh: bool = False
    ) -> str | None:
        if self.resolve(create=False, timeout=timeout) is None:
            return None
        if not fresh:
            with self._lock:
                known = self._entries.get(rel)
            if known is not None:
                return known
        return self.read(timeout).get(rel)


def _encode(entries: dict[str, str]) -> bytes:
    return json.dumps({"format": 1, "files": entries}, sort_keys=True).encode()


def _decode(data: bytes) -> dict[str, str]:
    value = json.loads(data.decode("utf-8")) if data else {}
    files = value.get("files", {}) if isinstance(value, dict) else {}
    return {str(rel): str(file_id) for rel, file_id in files.items()}

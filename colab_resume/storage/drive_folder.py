"""The run folder of a gdrive:// run directory, and its index (a cache).

The folder is found by name below its base folder, one level at a time.
Drive allows several folders (and indexes) of one name, so:

- **Intermediate folders**: everyone takes the oldest by ``createdTime``
  then id, and a creator whose own copy lost deletes it while empty.
- **The run folder** is chosen by identity
  (:mod:`colab_resume.storage.drive_choice`). A new run folder carries a
  fresh run id (:mod:`colab_resume.storage.drive_proof`).

**The index** maps each object's path to its file id. It changes only by a
conditional update (v2 ``If-Match``), re-read and retried on 412. It is a
cache of what the files prove: an index that is missing, trashed,
unparsable, of the wrong shape or too large
(:mod:`colab_resume.storage.drive_index`) is never read as a fresh run
while the folder holds files of the run. A reader then works from the
files' proof (:attr:`RunFolder.damage` says what was wrong); a writer
rebuilds the index from it first (an index in the trash: restores it).
A rebuilt index names each proven file that was *claimed* (touched after
its upload, see :mod:`colab_resume.storage.drive`); an upload killed before
its claim stays unnamed, a leftover, as it would have with the index
intact.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from colab_resume.errors import CorruptRecordError
from colab_resume.retry import jitter
from colab_resume.storage import drive_choice, drive_index
from colab_resume.storage import drive_proof as proof
from colab_resume.storage.drive_api import FOLDER_MIME, DriveApi, DriveHttpError, quote
from colab_resume.storage.drive_index import INDEX_NAME, DamagedIndexError, touched

log = logging.getLogger(__name__)

# Conditional index updates lost to other writers before giving up (each
# loss means another write landed: progress, not a fault).
_MAX_INDEX_RACES = 200
# Names only a run's own folder holds: unproven files of these names mean a
# copy of a run made by another program.
_RUN_NAMES = (INDEX_NAME, "run.json")


class RunFolder:
    """The run folder's id, its run id, its index's id and entries as last read.

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
        self.run_id: str | None = None  # None: a legacy folder (or none yet)
        self.index_id: str | None = None
        # What was wrong with the index when this store found it; None: fine.
        self.damage: str | None = None
        self._entries: dict[str, str] = {}  # path -> file id, as last read
        self._from_proof = False  # the entries come from the files, not an index

    def forget(self, rel: str) -> None:
        """Drop a cached id whose file turned out to be gone."""
        with self._lock:
            self._entries.pop(rel, None)

    # --- finding the folder and its index ------------------------------------

    def resolve(self, *, create: bool, timeout: float | None) -> str | None:
        """The run folder's id; None if there is no run and ``create`` is false."""
        if self.folder_id is not None and (self.index_id or not create):
            if self.index_id or self._from_proof:
                return self.folder_id
        with self._resolving:  # one resolution per store, not one per thread
            if self.folder_id is None and not self._find_folder(create, timeout):
                return None
            if self.index_id is None and (create or not self._from_proof):
                if not self._find_index(create, timeout):
                    return None
            return self.folder_id

    def _find_folder(self, create: bool, timeout: float | None) -> bool:
        parent = self.base
        *above, last = self.segments or [""]
        for name in above:
            query = (
                f"name = {quote(name)} and {quote(parent)} in parents and "
                f"mimeType = '{FOLDER_MIME}' and trashed = false"
            )
            make = functools.partial(
                self.api.create_folder, name, parent, timeout=timeout
            )
            found = self._settle(query, timeout, create, make, self._first)
            if found is None:
                return False
            parent = found["id"]
        if not self.segments:  # gdrive://id:FOLDER: that folder is the run's
            chosen = self.api.get(parent, "id,appProperties", timeout=timeout)
        else:
            query = (
                f"name = {quote(last)} and {quote(parent)} in parents and "
                f"mimeType = '{FOLDER_MIME}' and trashed = false"
            )
            make = functools.partial(
                self.api.create_folder,
                last,
                parent,
                properties={proof.RUN_KEY: proof.new_run_id()},
                timeout=timeout,
            )
            found = self._settle(query, timeout, create, make, self._choose)
            if found is None:
                return False
            chosen = found
        with self._lock:
            self.folder_id = str(chosen["id"])
            self.run_id = proof.run_of(chosen)
        return True

    def _find_index(self, create: bool, timeout: float | None) -> bool:
        """Find, check and (for a writer) repair the index. False: no run here."""
        folder = self.folder_id
        assert folder is not None
        if self.run_id is None and create:
            self._adopt(timeout)  # a legacy folder: stamp it first
        index = self._index_file(timeout)
        if index is not None:
            if index.get("trashed"):
                self._trashed_index(str(index["id"]), index, create, timeout)
            try:
                entries = self._read_index(str(index["id"]), timeout)
            except DamagedIndexError as exc:
                self.damage = str(exc)
                if not create:
                    return self._use_proof(timeout)
                self._rebuild_in_place(str(index["id"]), timeout)
                return True
            with self._lock:
                self.index_id, self._entries = str(index["id"]), entries
                self._from_proof = False
            return True
        run_files = self.proven_files(timeout)
        if not run_files and not create:
            return False  # no run here
        if run_files:
            self.damage = f"the run's index ({INDEX_NAME}) was deleted"
        if not create:
            return self._use_proof(timeout, run_files)
        entries = drive_index.claimed(run_files)
        if entries:
            log.warning(
                "storage: %s: %s; rebuilt it from the proof of %d file(s)",
                self.url,
                self.damage,
                len(entries),
            )
        make = functools.partial(self._new_index, folder, entries, timeout)
        query = (
            f"name = '{INDEX_NAME}' and {quote(folder)} in parents and trashed = false"
        )
        made = self._settle(query, timeout, True, make, self._first_index)
        assert made is not None
        index_id = str(made["id"])
        with self._lock:
            self.index_id, self._from_proof = index_id, False
        self._read_index(index_id, timeout)
        return True

    def _index_file(self, timeout: float | None) -> dict[str, Any] | None:
        """The run's index file: the oldest out of the trash, else in it.

        The trash counts: an index a person trashed is still the run's.
        """
        folder = self.folder_id
        assert folder is not None
        query = f"name = '{INDEX_NAME}' and {quote(folder)} in parents"
        found = [
            raw
            for raw in self.api.children(query, proof.FIELDS, timeout=timeout)
            if proof.why_not_ours(raw, folder, self.run_id, INDEX_NAME, trash_ok=True)
            is None
        ]
        live = drive_index.oldest([raw for raw in found if not raw.get("trashed")])
        return live or drive_index.oldest(found)

    def _trashed_index(
        self, index_id: str, raw: dict[str, Any], create: bool, timeout: float | None
    ) -> None:
        """The index is in the Drive trash: a writer takes it back out."""
        if not create:
            self.damage = (
                f"the run's index ({INDEX_NAME}) is in the Drive trash; the "
                f"next session restores it (or restore it by hand)"
            )
            return  # a trashed file still reads by id
        log.warning(
            "storage: %s: the run's index was in the Drive trash; restored it",
            self.url,
        )
        self.api.update_metadata(
            index_id,
            trashed=False,
            keep_modified=str(raw["modifiedTime"]),
            timeout=timeout,
        )

    def _use_proof(
        self, timeout: float | None, files: list[dict[str, Any]] | None = None
    ) -> bool:
        """A reader's view when the index cannot be used: the files' proof
        (``files``: :meth:`proven_files` as just listed)."""
        if self.run_id is None:
            raise DamagedIndexError(
                f"{self.url}: {self.damage}, and the run was made before files "
                f"carried proof of their run, so the index cannot be rebuilt. "
                f"Restore the index from the Drive trash (or an older version "
                f"of it), or start a new run_dir."
            )
        if files is None:
            files = self.proven_files(timeout)
        entries = drive_index.claimed(files)
        with self._lock:
            self._entries, self._from_proof = entries, True
        return True

    def _rebuild_in_place(self, index_id: str, timeout: float | None) -> None:
        """Replace a damaged index with what the files prove (If-Match)."""
        if self.run_id is None:
            self._use_proof(timeout)  # raises: a legacy index cannot be rebuilt
        for _ in range(_MAX_INDEX_RACES):
            etag = self.api.etag(index_id, timeout=timeout)
            try:
                self._read_index(index_id, timeout)
            except DamagedIndexError:
                entries = drive_index.claimed(self.proven_files(timeout))
                if self.api.replace_if_match(
                    index_id, drive_index.encode(entries), etag, timeout=timeout
                ):
                    log.warning(
                        "storage: %s: %s; rebuilt it from the proof of %d file(s)",
                        self.url,
                        self.damage,
                        len(entries),
                    )
                    self._read_index(index_id, timeout)
                    break
                continue
            break  # someone else repaired it meanwhile
        with self._lock:
            self.index_id, self._from_proof = index_id, False

    def repair(self, timeout: float | None) -> str:
        """Find the index again as a writer would, repairing it; what was done."""
        with self._resolving, self._lock:
            self.index_id, self._from_proof = None, False
        found = self.damage
        self.resolve(create=True, timeout=timeout)
        named = len(self._entries)
        if found is None:
            return f"{self.url}: the index is sound ({named} file(s)); nothing to do"
        return f"{self.url}: {found}. Repaired: the index names {named} file(s)"

    def check_index(self, timeout: float | None) -> None:
        """Notice an index trashed, moved or deleted under a live writer; repair it.

        A trashed index is taken back out of the trash. One deleted (or
        moved away) is replaced by the index every other session finds
        (rebuilt from the files' proof, this writer's claims merged in), so
        the lease records in it fence as they would have.
        """
        index_id = self.index_id
        if index_id is None:
            return
        try:
            raw = self.api.get(index_id, proof.FIELDS, timeout=timeout)
        except FileNotFoundError:
            raw = None
        if raw is not None and self.folder_id in (raw.get("parents") or []):
            if raw.get("trashed"):
                self._trashed_index(index_id, raw, True, timeout)
            return
        self._refind(create=True, timeout=timeout)

    def _refind(self, *, create: bool, timeout: float | None) -> None:
        """The index this store used is gone (deleted, moved): find it anew.

        A writer's own entries are merged into the index it finds (rebuilt
        from the files' proof, or another session's), so nothing it wrote
        is lost to the swap.
        """
        with self._lock:
            known = dict(self._entries)
            self.index_id, self._from_proof = None, False
        log.warning(
            "storage: %s: the run's index was deleted or moved while in use; "
            "finding it again (rebuilt from the files' proof where it is gone)",
            self.url,
        )
        self.resolve(create=create, timeout=timeout)
        if create:
            self._merge(known, timeout)

    def _merge(self, known: dict[str, str], timeout: float | None) -> None:
        """Claim into the current index this session's entries it lacks."""
        assert self.folder_id is not None
        current = self.read(timeout)
        missing = {}
        for rel, file_id in known.items():
            if rel in current:
                continue
            try:
                raw = self.api.get(file_id, proof.FIELDS, timeout=timeout)
            except FileNotFoundError:
                continue
            if proof.why_not_ours(raw, self.folder_id, self.run_id, rel) is None:
                missing[rel] = file_id
        if not missing:
            return

        def add(entries: dict[str, str]) -> dict[str, str] | None:
            new = {rel: fid for rel, fid in missing.items() if rel not in entries}
            return {**entries, **new} if new else None

        self.update(add, timeout)

    def _adopt(self, timeout: float | None) -> None:
        """Stamp a legacy folder (made before provenance) and the files it names.

        Only files its index names that lie in it under their path's name are
        stamped; their stamps (``modifiedTime``) are kept, which the commit
        rule reads. The folder's run id is set last: a session killed midway
        leaves a legacy folder, and the next one finishes the job.
        """
        folder = self.folder_id
        assert folder is not None
        index = self._index_file(timeout)  # judged by name: run_id is None here
        if index is not None and index.get("trashed"):
            self._trashed_index(str(index["id"]), index, True, timeout)
        if index is None:
            listing = self.api.children(
                f"{quote(folder)} in parents and trashed = false",
                "id,name",
                timeout=timeout,
            )
            if any(raw.get("name") in _RUN_NAMES for raw in listing):
                raise self._copied(folder)
            run_id = proof.new_run_id()
            self.api.update_metadata(
                folder, properties={proof.RUN_KEY: run_id}, timeout=timeout
            )
            self.run_id = run_id
            return
        entries = self._read_index(str(index["id"]), timeout)
        files = {
            raw["id"]: raw
            for raw in self.api.children(
                f"{quote(folder)} in parents and trashed = false",
                proof.FIELDS,
                timeout=timeout,
            )
        }
        mine = {
            rel: files[fid]
            for rel, fid in entries.items()
            if fid in files
            and proof.why_not_ours(files[fid], folder, None, rel) is None
        }
        if entries and not mine:
            raise self._copied(folder)
        run_id = proof.new_run_id()
        for rel, raw in [(INDEX_NAME, index), *mine.items()]:
            self.api.update_metadata(
                str(raw["id"]),
                properties=proof.stamp(run_id, rel),
                keep_modified=str(raw["modifiedTime"]),
                timeout=timeout,
            )
        self.api.update_metadata(
            folder, properties={proof.RUN_KEY: run_id}, timeout=timeout
        )
        self.run_id = run_id
        log.info(
            "storage: %s: stamped %d files with the run's proof", self.url, len(mine)
        )

    def _copied(self, folder: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"{self.url} (Drive folder {folder}) holds a colab_resume run's "
            f"files that carry no proof this run wrote them: it is a copy "
            f"made by another program (the web UI, a sync client, `cp` on the "
            f"mount). A copy cannot be resumed in place, since nothing in it "
            f"can be told from a file dropped in. Resume the original folder "
            f"(gdrive://id:ORIGINAL_FOLDER_ID), or start a new run_dir."
        )

    def proven_files(self, timeout: float | None) -> list[dict[str, Any]]:
        """Every file of the run folder that proves it is the run's (any path
        but the index's; none in a legacy folder, whose files prove nothing)."""
        folder = self.folder_id
        assert folder is not None
        if self.run_id is None:
            return []
        files = self.api.children(
            f"{quote(folder)} in parents and trashed = false",
            proof.FIELDS,
            timeout=timeout,
        )
        return [
            raw
            for raw in files
            if proof.why_not_ours(raw, folder, self.run_id) is None
            and proof.path_of(raw) != INDEX_NAME
        ]

    def _new_index(
        self, folder: str, entries: dict[str, str], timeout: float | None
    ) -> str:
        metadata: dict[str, Any] = {
            "name": INDEX_NAME,
            "parents": [folder],
            "mimeType": "application/json",
        }
        if self.run_id is not None:
            metadata["appProperties"] = proof.stamp(self.run_id, INDEX_NAME)
        reply = self.api.create(
            metadata, drive_index.encode(entries), None, timeout=timeout
        )
        return str(reply["id"])

    def _settle(
        self,
        query: str,
        timeout: float | None,
        create: bool,
        make: Callable[[], str],
        choose: Callable[[list[dict[str, Any]], float | None], dict[str, Any] | None],
    ) -> dict[str, Any] | None:
        """The chosen file matching ``query``, made if there is none.

        Of two creators racing, both list again after making theirs and
        choose alike; the one whose copy lost deletes it while it is still
        as made.
        """
        fields = proof.FIELDS
        chosen = choose(self.api.children(query, fields, timeout=timeout), timeout)
        if chosen is not None:
            return chosen
        if not create:
            return None
        mine = make()
        chosen = choose(self.api.children(query, fields, timeout=timeout), timeout)
        if chosen is None:
            raise CorruptRecordError(
                f"{self.url}: what this session just made in Drive is not listed"
            )
        if chosen["id"] != mine:
            log.info("storage: another session created %s first; using it", self.url)
            if self._unused(mine, timeout):
                self.api.delete(mine, timeout=timeout)
        return chosen

    @staticmethod
    def _first(
        found: list[dict[str, Any]], timeout: float | None
    ) -> dict[str, Any] | None:
        return drive_index.oldest(found)

    def _first_index(
        self, found: list[dict[str, Any]], timeout: float | None
    ) -> dict[str, Any] | None:
        assert self.folder_id is not None
        return drive_index.oldest(
            [
                raw
                for raw in found
                if proof.why_not_ours(raw, self.folder_id, self.run_id, INDEX_NAME)
                is None
            ]
        )

    def _choose(
        self, found: list[dict[str, Any]], timeout: float | None
    ) -> dict[str, Any] | None:
        return drive_choice.choose(self.api, self.url, found, timeout)

    def _unused(self, file_id: str, timeout: float | None) -> bool:
        """Whether a losing copy is still as made: no children, an empty index.

        Someone who listed before the winner showed up may have taken ours;
        then it stays (a reader takes the winner, and ours is only quota).
        """
        query = f"{quote(file_id)} in parents and trashed = false"
        if self.api.children(query, "id", timeout=timeout):
            return False
        raw = self.api.get(
            file_id, "mimeType,modifiedTime,createdTime", timeout=timeout
        )
        if raw.get("mimeType") == FOLDER_MIME:
            return True
        return not touched(raw)  # an index nobody updated since it was made

    # --- reading and changing the index --------------------------------------

    def _read_index(self, index_id: str, timeout: float | None) -> dict[str, str]:
        entries = drive_index.read(
            self.api, index_id, f"{self.url}/{INDEX_NAME}", timeout
        )
        with self._lock:
            self._entries = dict(entries)
        return entries

    def read(self, timeout: float | None) -> dict[str, str]:
        """The entries now: the index's, or the files' proof where it is damaged."""
        if self.index_id is None and not self._from_proof:
            if self.resolve(create=False, timeout=timeout) is None:
                return {}
        if self.index_id is None:
            self._use_proof(timeout)
            with self._lock:
                return dict(self._entries)
        try:
            return self._read_index(self.index_id, timeout)
        except FileNotFoundError:
            self._refind(create=False, timeout=timeout)
            if self.index_id is None and not self._from_proof:
                return {}
            return self.read(timeout)

    @property
    def trusted(self) -> bool:
        """Whether the entries come from a readable index (deletions may rest on it)."""
        return self.index_id is not None and not self._from_proof

    def update(self, change: Any, timeout: float | None) -> dict[str, str]:
        """Apply ``change(entries) -> entries or None`` under If-Match; the result."""
        if self.index_id is None:
            self.resolve(create=True, timeout=timeout)
        assert self.index_id is not None
        for _ in range(_MAX_INDEX_RACES):
            try:
                etag = self.api.etag(self.index_id, timeout=timeout)
                entries = self._read_index(self.index_id, timeout)
            except FileNotFoundError:
                self._refind(create=True, timeout=timeout)
                assert self.index_id is not None
                continue
            changed = change(dict(entries))
            if changed is None:
                return entries
            if self.api.replace_if_match(
                self.index_id, drive_index.encode(changed), etag, timeout=timeout
            ):
                with self._lock:
                    self._entries = dict(changed)
                return dict(changed)
            time.sleep(jitter(0.0, 0.05))  # lost a race: let it land
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

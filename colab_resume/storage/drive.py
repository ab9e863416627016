"""A run directory in Google Drive, through the Drive REST API (never the mount).

URLs::

    gdrive://runs/mnist              the folder runs/mnist in My Drive
    gdrive://id:FOLDER_ID/runs/mnist below the folder with that id (a shared
                                     drive, or a folder shared with a
                                     service account)
    gdrive://id:FOLDER_ID            that folder itself

Storage options: ``token`` (credentials, a key file, or a raw access token;
see :func:`colab_resume.storage.auth.drive_credentials`) and
``endpoint_url`` (an emulator; else ``DRIVE_EMULATOR_HOST`` if set).

**Layout.** The run directory is one Drive folder. Its objects are plain
files directly inside it, each named by its path relative to the run
directory (``checkpoints/00000003/ckpt.index``), and an *index*,
``.colab-resume-index.json``, maps each path to its file's id. Drive allows
several files of one name in a folder; names here are for people: a
reader resolves a path only through the index, so a file planted by hand
(or an orphan of an interrupted write) is never mistaken for an object.

**Provenance** (:mod:`colab_resume.storage.drive_proof`). Every upload
carries the run's id and its path as ``appProperties``, and an id the
index names is used only once its file proves to be the run's file of
that path (:meth:`DriveStore._verified`): an index edited to name a
user's file, or a file dropped in with a run file's name, is never read,
overwritten or deleted. The index itself is a cache of that proof,
restored or rebuilt when it is lost (:mod:`colab_resume.storage.drive_folder`).

**Create-only** (the lease race, the manifest commit). Drive has no
create-if-absent, but it has conditional updates: a v2 content update with
``If-Match: <etag>`` is refused with 412 when the file changed since that
etag was read. A create uploads the bytes as a new file, whose id comes
from ``generateIds`` once per write (every retry of it uses the same id, so
a retry after a lost answer meets its own file: ``409``, and then
:meth:`written_by` says yes), checks Drive's MD5 of them, and then adds
path -> id to the index under ``If-Match``. Of two creators of one path,
both index updates start from some etag; the first to land changes it, the
second gets 412, re-reads, finds the path taken, deletes its own upload
and raises ``FileExistsError``. So exactly one wins, on Drive's
conditional update alone. An overwrite (a heartbeat) replaces the content
of the file the index names, by id: the index does not change.

**Folders.** Creating the run folder (and its index) is itself a race on
Drive: two first sessions may both create one. Everyone picks the same
one, the oldest by ``createdTime`` then id, and a creator whose folder or
index lost deletes it while it is still empty. This holds as long as a
file Drive has acknowledged shows up in later listings (Drive's listings
of a folder's children are consistent for the same user in practice, not
by a documented guarantee): two sessions started seconds apart on one new
run directory are the only case that relies on it.

**Clocks.** An object becomes visible when the index names it, and no
single Drive stamp marks that moment, so an object carries two bounds of
it (:class:`~colab_resume.storage.ObjectInfo`): ``visible_from``, its
file's ``createdTime`` (the upload, before the claim), and ``updated``, its
``modifiedTime`` once a ``files.touch`` right after the claim stamped it
(or an overwrite did); between claim and touch the index's own
``modifiedTime`` bounds the claim instead. The commit rule judges a
manifest by the later bound against the next lease's earlier one, so it
errs towards "late", never "in time". :meth:`server_time` is the ``Date``
header of a Drive response: every stamp comes from Google's servers,
never from this machine.

**Deletion** is ``files.delete``: permanent, never the trash (which would
still count against the owner's quota). The files no index names (an
upload killed before its claim, a delete killed between index and file)
are :meth:`~DriveStore.leftovers`: invisible to readers, but they take
quota, so retention deletes those of the checkpoints it removes
(``checkpoint/retention.py``).
"""

from __future__ import annotations

import builtins
import logging
import os
import threading
from collections.abc import Collection
from typing import Any

from colab_resume import defaults
from colab_resume.errors import (
    BucketNotFoundError,
    NoCredentialsError,
    PermissionDeniedError,
    StorageError,
    StorageFullError,
    UnsupportedURLError,
)
from colab_resume.redact import redact
from colab_resume.storage import auth
from colab_resume.storage import drive_proof as proof
from colab_resume.storage.checksum import StreamingCrc32c
from colab_resume.storage.drive_api import (
    QUOTA_FULL_REASONS,
    UPLOAD_CAP_REASONS,
    DriveApi,
    DriveHttpError,
    UploadChecksumError,
    quote,
)
from colab_resume.storage.drive_folder import RunFolder
from colab_resume.storage.drive_index import DamagedIndexError, parse_time, touched
from colab_resume.storage.store_contract import ObjectInfo, Store

log = logging.getLogger(__name__)

_CHUNK = 1 << 20


def _object_info(rel: str, raw: dict[str, Any], claims_by: float | None) -> ObjectInfo:
    """One object's stamps: it became visible when the index named it, which
    is after its upload (``createdTime``) and, once it is touched, before its
    ``modifiedTime``. Between claim and touch (a writer that died there, or a
    read in that one request) the index's own stamp bounds the claim instead.
    """
    created = parse_time(raw["createdTime"])
    if touched(raw) or claims_by is None:
        updated = parse_time(raw["modifiedTime"])
    else:
        updated = max(claims_by, created)
    return ObjectInfo(
        rel, int(raw.get("size", 0)), updated, visible_from=min(created, updated)
    )


class DriveStore(Store):
    """A run directory in Google Drive; see the module docstring."""

    heartbeat_seconds = defaults.DRIVE_HEARTBEAT_SECONDS
    service = "Drive"
    daily_upload_bytes = defaults.DRIVE_DAILY_UPLOAD_BYTES
    upload_stream_bytes_per_second = defaults.DRIVE_UPLOAD_STREAM_BYTES_PER_SECOND
    # Each upload is a resumable session of several requests and names its
    # file in the run's index; Drive answers bursts with 403/429 rate limits
    # (retried with backoff), so fewer streams than on Cloud Storage.
    transfer_streams = 8

    def __init__(
        self, url: str, protocol: str, root: str, storage_options: dict[str, Any]
    ) -> None:
        super().__init__(url, protocol, root, storage_options)
        options = dict(storage_options)
        token = options.pop("token", None)
        endpoint = options.pop("endpoint_url", None) or os.environ.get(
            "DRIVE_EMULATOR_HOST"
        )
        options.pop("project", None)  # a Cloud project means nothing to Drive
        if options:
            raise UnsupportedURLError(
                f"Unknown storage_options for {url}: {sorted(options)}; a gdrive:// "
                f"run_dir takes 'token' and 'endpoint_url'."
            )
        try:
            credentials = auth.drive_credentials(token)
        except NoCredentialsError as exc:
            if url.startswith(f"{protocol}://"):
                raise
            # A path on the Drive mount, routed here (storage.drivefs).
            raise NoCredentialsError(
                f"run_dir {url!r} is on the Google Drive mount, which colab_resume "
                f"does not trust (writes are cached and synced late or never), so "
                f"it uses the same folder through the Drive API, for which it "
                f"needs credentials: {exc}"
            ) from None
        self.principal = auth.describe_principal(
            token if token is not None else credentials
        )
        self.api = DriveApi(credentials, endpoint)
        self.base, self.segments = split_root(root)
        self.folder = RunFolder(self.api, url, self.base, self.segments)
        self._lock = threading.Lock()
        self._write_ids: dict[str, str] = {}  # write_id -> the id its file gets
        self._unnamed: dict[str, str] = {}  # path -> id dropped from the index
        self._proven: dict[str, str] = {}  # file id -> the path it proved to be

    @classmethod
    def validate_url(cls, url: str, root: str) -> None:
        base, segments = split_root(root)
        if base == "root" and not segments:
            raise UnsupportedURLError(
                f"run_dir {url!r} names no folder. Use 'gdrive://runs/NAME' (My "
                f"Drive) or 'gdrive://id:FOLDER_ID/runs/NAME'."
            )

    def path(self, rel: str) -> str:
        return f"{self.url.rstrip('/')}/{rel}" if rel else self.url

    # --- the run folder and its index (storage.drive_folder) ----------------

    @property
    def _index(self) -> str | None:
        return self.folder.index_id

    def _run_folder(self, *, create: bool, timeout: float | None) -> str | None:
        return self.folder.resolve(create=create, timeout=timeout)

    def _lookup(
        self, rel: str, timeout: float | None, *, fresh: bool = False
    ) -> str | None:
        return self.folder.lookup(rel, timeout, fresh=fresh)

    def _verified(
        self, rel: str, file_id: str, timeout: float | None, raw: Any = None
    ) -> bool:
        """Whether ``file_id`` is the run's file of ``rel`` (drive_proof).

        Whatever the index says: an id it names that fails the test is
        never read, overwritten or deleted. A file of the run found in the
        trash is taken back out of it (a person's slip, not the run's
        intent). FileNotFoundError if the file is gone.
        """
        with self._lock:
            if self._proven.get(file_id) == rel:
                return True
        if raw is None:
            raw = self.api.get(file_id, proof.FIELDS, timeout=timeout)
        folder = self.folder.folder_id
        assert folder is not None
        why = proof.why_not_ours(raw, folder, self.folder.run_id, rel, trash_ok=True)
        if why is not None:
            log.warning(
                "storage: %s: the run's index names Drive file %s, which is "
                "not the run's (%s); it is left alone",
                self.path(rel),
                file_id,
                why,
            )
            return False
        if raw.get("trashed"):
            log.warning(
                "storage: %s was in the Drive trash; restored it", self.path(rel)
            )
            self.api.update_metadata(
                file_id,
                trashed=False,
                keep_modified=str(raw["modifiedTime"]),
                timeout=timeout,
            )
        with self._lock:
            self._proven[file_id] = rel
        return True

    def _by_id(self, rel: str, timeout: float | None, use: Any) -> Any:
        """``use(file_id)`` for the run's file of ``rel``; FileNotFoundError if none.

        The cached id is tried first; if its file is gone (deleted and
        maybe made again by another session) the index is read again once.
        """
        missing = f"{self.path(rel)}: no such object"
        file_id = self._lookup(rel, timeout)
        try:
            if file_id is None or not self._verified(rel, file_id, timeout):
                raise FileNotFoundError(missing)
            return use(file_id)
        except FileNotFoundError:
            fresh = self._lookup(rel, timeout, fresh=True)
            if fresh is None or fresh == file_id:
                raise FileNotFoundError(missing) from None
            if not self._verified(rel, fresh, timeout):
                raise FileNotFoundError(missing) from None
            return use(fresh)

    # --- the primitives ----------------------------------------------------

    def check(self, *, timeout: float | None = None) -> None:
        if self.base == "root":
            self.api.call(
                "GET", "/drive/v3/about", params={"fields": "kind"}, timeout=timeout
            )
            return
        try:
            self.api.get(self.base, "id,mimeType", timeout=timeout)
        except FileNotFoundError:
            raise BucketNotFoundError(
                f"The Drive folder id {self.base!r} of run_dir {self.url!r} does "
                f"not exist or is not shared with {self.principal}. Share the "
                f"folder with that account (as Editor), or fix the id."
            ) from None

    def server_time(self, *, timeout: float | None = None) -> float:
        return self.api.server_time(timeout=timeout)

    def exists(self, rel: str, *, timeout: float | None = None) -> bool:
        try:
            self._by_id(
                rel, timeout, lambda fid: self.api.get(fid, "id", timeout=timeout)
            )
        except FileNotFoundError:
            return False
        return True

    def read(
        self, rel: str, *, max_bytes: int | None = None, timeout: float | None = None
    ) -> bytes:
        first = None if max_bytes is None else max_bytes + 1

        def fetch(file_id: str) -> bytes:
            with self.api.download(
                file_id, timeout=timeout, first_bytes=first
            ) as response:
                if response.status_code == 416:
                    return b""  # no range of an empty file
                data = bytearray()
                for block in response.iter_content(_CHUNK):
                    data += block
                    if first is not None and len(data) >= first:
                        break
            return bytes(data if first is None else data[:first])

        result: bytes = self._by_id(rel, timeout, fetch)
        return result

    def info(self, rel: str, *, timeout: float | None = None) -> ObjectInfo:
        raw = self._by_id(
            rel, timeout, lambda fid: self.api.get(fid, proof.FIELDS, timeout=timeout)
        )
        claims_by = None
        index_id = self.folder.index_id
        if not touched(raw) and index_id is not None:  # between claim and touch
            index = self.api.get(index_id, "modifiedTime", timeout=timeout)
            claims_by = parse_time(index["modifiedTime"])
        return _object_info(rel, raw, claims_by)

    def list(self, prefix: str, *, timeout: float | None = None) -> list[ObjectInfo]:
        folder = self._run_folder(create=False, timeout=timeout)
        if folder is None:
            return []
        entries = self.folder.read(timeout)
        stem = prefix.strip("/")
        wanted = {
            file_id: rel
            for rel, file_id in entries.items()
            if not stem or rel == stem or rel.startswith(stem + "/")
        }
        if not wanted:
            return []
        # Trashed files too: one of the run's found there is restored.
        files = self.api.children(
            f"{quote(folder)} in parents", proof.FIELDS, timeout=timeout
        )
        # The index is listed with the files, after it was read: its stamp
        # is no earlier than any claim in the entries read.
        index = [raw for raw in files if raw["id"] == self.folder.index_id]
        claims_by = parse_time(index[0]["modifiedTime"]) if index else None
        return [
            _object_info(wanted[raw["id"]], raw, claims_by)
            for raw in files
            if raw["id"] in wanted
            and self._verified(wanted[raw["id"]], raw["id"], timeout, raw)
        ]

    def write(
        self,
        rel: str,
        data: bytes,
        *,
        create_only: bool,
        write_id: str,
        timeout: float | None = None,
    ) -> None:
        self._write(
            rel, data, None, create_only=create_only, write_id=write_id, timeout=timeout
        )

    def put_file(
        self,
        local_path: str,
        rel: str,
        *,
        timeout: float | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        # chunk_bytes is not needed: a large file already goes by resumable
        # upload, read from disk one piece at a time (drive_api.py).
        # One id for every attempt at making this object (Storage retries
        # call again without an id): a retry meets its own upload (409),
        # instead of leaving it unnamed.
        write_id = f"upload:{rel}"
        self._write(
            rel, None, local_path, create_only=False, write_id=write_id, timeout=timeout
        )
        with self._lock:
            self._write_ids.pop(write_id, None)

    def _write(
        self,
        rel: str,
        data: bytes | None,
        local_path: str | None,
        *,
        create_only: bool,
        write_id: str,
        timeout: float | None,
    ) -> None:
        folder = self._run_folder(create=True, timeout=timeout)
        assert folder is not None
        # Ids the index names for rel that are not (or no longer) the run's
        # file of it: the path is free, and the claim replaces them.
        vacant: set[str] = set()
        if not create_only:
            file_id = self._lookup(rel, timeout)
            if file_id is not None:
                try:
                    if self._verified(rel, file_id, timeout):
                        self.api.replace(file_id, data, local_path, timeout=timeout)
                        self.folder.check_index(timeout)
                        return
                except FileNotFoundError:  # deleted meanwhile: make it anew
                    self.folder.forget(rel)
                vacant.add(file_id)
        else:
            named = self._lookup(rel, timeout, fresh=True)
            if named not in (None, self._write_ids.get(write_id)):
                if self._still_ours(rel, str(named), timeout):
                    raise FileExistsError(f"{self.path(rel)} exists")  # no upload lost
                vacant.add(str(named))
        try:
            self._create(rel, data, local_path, folder, write_id, timeout, vacant)
        except FileExistsError:
            if create_only:
                raise
            self._by_id(
                rel,
                timeout,
                lambda fid: self.api.replace(fid, data, local_path, timeout=timeout),
            )

    def _still_ours(self, rel: str, file_id: str, timeout: float | None) -> bool:
        """Whether the index's file of ``rel`` is the run's and still there."""
        try:
            return self._verified(rel, file_id, timeout)
        except FileNotFoundError:
            return False

    def _create(
        self,
        rel: str,
        data: bytes | None,
        local_path: str | None,
        folder: str,
        write_id: str,
        timeout: float | None,
        vacant: Collection[str] = (),
    ) -> None:
        """Upload a new file, then claim ``rel`` for it in the index (the commit).

        Args:
            vacant: ids the index may name for ``rel`` that do not hold it
                (files gone, or not the run's): the claim replaces them.
        """
        with self._lock:
            file_id = self._write_ids.get(write_id) if write_id else None
        if file_id is None:
            file_id = self.api.generate_id(timeout=timeout)
            if write_id:
                with self._lock:
                    self._write_ids[write_id] = file_id
        metadata: dict[str, Any] = {"id": file_id, "name": rel, "parents": [folder]}
        if self.folder.run_id is not None:
            # The proof is set with the bytes, before the file is named anywhere.
            metadata["appProperties"] = proof.stamp(self.folder.run_id, rel)
        try:
            self.api.create(metadata, data, local_path, timeout=timeout)
        except UploadChecksumError:
            self._forget(write_id, file_id, timeout)
            raise
        except DriveHttpError as exc:
            if exc.status != 409:
                raise
            # An earlier attempt of this write made it; its answer was lost.
            # Its bytes were never checked: check them now.
            theirs = self.api.get(file_id, "md5Checksum", timeout=timeout).get(
                "md5Checksum"
            )  # (a file of our generated id: nobody else's)
            if theirs != _md5_of(data, local_path):
                self._forget(write_id, file_id, timeout)
                raise UploadChecksumError(
                    f"an earlier upload of {rel} arrived damaged"
                ) from None

        def claim(entries: dict[str, str]) -> dict[str, str] | None:
            if rel in entries and entries[rel] not in vacant:
                return None
            entries[rel] = file_id
            return entries

        if self.folder.update(claim, timeout).get(rel) != file_id:
            self.api.delete(file_id, timeout=timeout)  # lost the race: no orphan
            raise FileExistsError(f"{self.path(rel)} exists")
        # The object became visible with the claim, after its upload stamped
        # modifiedTime. The commit rule reads `updated` as "visible by then"
        # (a manifest counts only if older than the next lease), so the
        # file is touched (v2 files.touch: "the current server time"):
        # modifiedTime now falls after the claim and before this call
        # returns, as a GCS object's creation time does.
        self.api.touch(file_id, timeout=timeout)
        with self._lock:
            self._proven[file_id] = rel

    def _forget(self, write_id: str, file_id: str, timeout: float | None) -> None:
        """Drop a damaged upload: the retry sends the bytes as a new file."""
        with self._lock:
            self._write_ids.pop(write_id, None)
        self.api.delete(file_id, timeout=timeout)

    def written_by(
        self, rel: str, write_id: str, *, timeout: float | None = None
    ) -> bool:
        with self._lock:
            mine = self._write_ids.get(write_id)
        return mine is not None and self._lookup(rel, timeout, fresh=True) == mine

    def get_file(
        self, rel: str, local_path: str, *, timeout: float | None = None
    ) -> None:
        self.get_file_checked(rel, local_path, timeout=timeout)

    def get_file_checked(
        self, rel: str, local_path: str, *, timeout: float | None = None
    ) -> tuple[int, str]:
        def fetch(file_id: str) -> tuple[int, str]:
            checksum = StreamingCrc32c()
            with self.api.download(file_id, timeout=timeout) as response:
                with open(local_path, "wb") as handle:
                    for block in response.iter_content(_CHUNK):
                        handle.write(block)
                        checksum.update(block)
            return checksum.size, checksum.value

        result: tuple[int, str] = self._by_id(rel, timeout, fetch)
        return result

    def delete(self, rel: str, *, timeout: float | None = None) -> None:
        file_id = self._lookup(rel, timeout, fresh=True)
        if file_id is not None:
            ours = self._still_ours(rel, file_id, timeout)  # gone: the name only

            def drop(entries: dict[str, str]) -> dict[str, str] | None:
                if entries.get(rel) != file_id:
                    return None
                del entries[rel]
                return entries

            # The index first: a crash between the two leaves an unnamed
            # file (quota, no confusion; retention's remove_leftovers
            # deletes it), never a name whose file is gone.
            if ours:
                with self._lock:
                    self._unnamed[rel] = file_id
            self.folder.update(drop, timeout)
        # A retry after a lost answer finds the name gone from the index:
        # the id kept from the first attempt still deletes the file.
        with self._lock:
            unnamed = self._unnamed.get(rel)
        if unnamed is not None:
            self.api.delete(unnamed, timeout=timeout)
            with self._lock:
                self._unnamed.pop(rel, None)

    def leftovers(
        self, prefix: str, *, timeout: float | None = None
    ) -> builtins.list[str]:
        return sorted(
            {str(proof.path_of(raw)) for raw in self._unnamed_files(prefix, timeout)}
        )

    def remove_leftovers(self, rel: str, *, timeout: float | None = None) -> None:
        for raw in self._unnamed_files(rel, timeout):
            self.api.delete(raw["id"], timeout=timeout)

    def _unnamed_files(
        self, prefix: str, timeout: float | None
    ) -> builtins.list[dict[str, Any]]:
        """The run's files below ``prefix`` that the index does not name:
        uploads killed before their claim, or deletes killed between the
        index and the file. They count against the owner's quota.

        Only files that prove they are the run's (drive_proof), by the path
        their proof names: a file dropped in, whatever its name, is never
        one. Nothing is deleted on an index that could not be read.
        """
        if self._run_folder(create=False, timeout=timeout) is None:
            return []
        # The files first, then the index: a file claimed before the index
        # is read is in it, so a claim landing meanwhile is never taken for
        # a leftover. (A legacy folder's strays prove nothing: none.)
        files = self.folder.proven_files(timeout)
        if not files:
            return []
        named = set(self.folder.read(timeout).values())
        if not self.folder.trusted:
            raise DamagedIndexError(
                f"{self.url}: {self.folder.damage}; no leftover is deleted "
                f"until the index is rebuilt (`colab-resume repair {self.url}`, "
                f"or any session that resumes the run)"
            )
        stem = prefix.strip("/") + "/"
        return [
            raw
            for raw in files
            if raw["id"] not in named and str(proof.path_of(raw)).startswith(stem)
        ]

    # --- the index's health -------------------------------------------------

    def damage(self) -> str | None:
        return self.folder.damage

    def repair(self, *, timeout: float | None = None) -> str:
        if self._run_folder(create=False, timeout=timeout) is None:
            raise FileNotFoundError(f"{self.url}: no run here to repair")
        return self.folder.repair(timeout)

    # --- faults ------------------------------------------------------------

    def refresh_credentials(self) -> None:
        """Refresh the credentials after a 401, unless they cannot renew."""
        import google.auth.exceptions
        import google.auth.transport.requests
        import google.oauth2.credentials

        credentials = self.api.credentials
        if isinstance(credentials, google.oauth2.credentials.Credentials) and not (
            credentials.refresh_token
        ):
            raise NoCredentialsError(
                f"Google Drive refused the access token for {self.url}: it has "
                f"expired (access tokens last about an hour), and a bare token "
                f"cannot be renewed. Authenticate again (`cr.authenticate()` in "
                f"Colab) or pass a fresh token, a key file, or credentials "
                f"with a refresh token."
            )
        try:
            credentials.refresh(google.auth.transport.requests.Request())
        except google.auth.exceptions.RefreshError as exc:
            if getattr(exc, "retryable", False):
                log.warning("storage: refreshing credentials failed; retrying")
                return
            raise NoCredentialsError(
                f"Google Drive refused the credentials for {self.url} and they "
                f"could not be renewed (their grant was revoked or expired). "
                f"Authenticate again (`cr.authenticate()` in Colab) or pass a "
                f"fresh key file."
            ) from None
        except Exception as exc:  # the retry will report the real fault
            # Type only: a refresh error's text may quote token material.
            log.warning(
                "storage: refreshing credentials failed: %s", type(exc).__name__
            )

    def explain(self, exc: OSError, operation: str) -> StorageError | None:
        if isinstance(exc, DriveHttpError) and exc.reason in QUOTA_FULL_REASONS:
            return StorageFullError(
                f"Google Drive of {self.principal} is full: could not {operation} in "
                f"{self.url}. The run stops at its newest committed checkpoint. Free "
                f"space (delete old runs with `colab-resume prune`, empty the Drive "
                f"trash) or buy storage, then start the run again to resume."
            )
        if isinstance(exc, DriveHttpError) and exc.reason in UPLOAD_CAP_REASONS:
            return StorageFullError(
                f"Google Drive refused to {operation} in {self.url}: {self.principal} "
                f"reached Drive's upload cap (750 GB per user per day). The run "
                f"stops at its newest committed checkpoint; start it again after "
                f"the cap resets (24 hours), or checkpoint less often or smaller."
            )
        return None

    def permission_denied(
        self, operation: str, exc: BaseException
    ) -> PermissionDeniedError:
        return PermissionDeniedError(
            f"Permission denied to {operation} in {self.url} for {self.principal} "
            f"({redact(str(exc))}). Share the folder with that account as Editor, "
            f"or authenticate with Drive access (`cr.authenticate()` in Colab)."
        )


def split_root(root: str) -> tuple[str, list[str]]:
    """(the base folder id, the folder names below it) of a gdrive:// path."""
    parts = [part for part in root.strip("/").split("/") if part]
    if parts and parts[0].startswith("id:"):
        base = parts[0][3:]
        if not base:
            raise UnsupportedURLError(f"gdrive://{root} has an empty folder id")
        return base, parts[1:]
    return "root", parts


def _md5_of(data: bytes | None, local_path: str | None) -> str:
    import hashlib

    digest = hashlib.md5()
    if data is not None:
        digest.update(data)
    else:
        from colab_resume.storage.drive_api import file_chunks

        for chunk in file_chunks(str(local_path)):
            digest.update(chunk)
    return digest.hexdigest()

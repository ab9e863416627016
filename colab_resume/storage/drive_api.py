"""The few Google Drive REST calls the Drive store makes, and their errors.

One :class:`DriveApi` per store: an ``AuthorizedSession`` on the Drive
endpoint (or an emulator's), one try per call. Retries belong to the
storage retry policy, so the session's own refresh-on-401 is switched off:
a 401 reaches the policy, which refreshes the credentials before retrying
(as for Cloud Storage).

Uploads: multipart (metadata and bytes in one request) up to
:data:`MULTIPART_LIMIT`, a resumable session in :data:`CHUNK` pieces read
from disk beyond it, so a checkpoint shard is never held in memory whole.
Every upload's MD5 is computed while its bytes are sent and compared with
the ``md5Checksum`` Drive computed from what it stored: a mismatch raises
:class:`UploadChecksumError` (retried) instead of returning.

Knows nothing of run directories.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import requests

from colab_resume.redact import redact

DRIVE_SCOPE = "https://www.googleapis.com/auth/drive"
DEFAULT_ENDPOINT = "https://www.googleapis.com"
FOLDER_MIME = "application/vnd.google-apps.folder"
# Drive documents multipart for files up to 5 MB; resumable beyond.
MULTIPART_LIMIT = 5 << 20
# Resumable chunks must be multiples of 256 KiB (Drive API, "Upload file data").
CHUNK = 8 << 20
# The longest a single request may take when the caller's budget is longer.
REQUEST_TIMEOUT = 60.0
# 403 reasons Drive uses for "slow down": retry with backoff, as for a 429.
RATE_LIMIT_REASONS = frozenset({"userRateLimitExceeded", "rateLimitExceeded"})
QUOTA_FULL_REASONS = frozenset({"storageQuotaExceeded"})
# The 750 GB per user per day upload cap.
UPLOAD_CAP_REASONS = frozenset({"uploadLimitExceeded", "dailyLimitExceeded"})
TRANSIENT_STATUSES = frozenset({401, 408, 429, 500, 502, 503, 504})
# Every query and update addresses shared drives too (harmless in My Drive).
ALL_DRIVES = {"supportsAllDrives": "true"}


class DriveHttpError(OSError):
    """Drive answered an error status; ``reason`` is its first error reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"Drive API HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        # Read by storage.faults.is_transient: 403 means "slow down" here.
        self.transient = status in TRANSIENT_STATUSES or (
            status == 403 and reason in RATE_LIMIT_REASONS
        )


class UploadChecksumError(OSError):
    """Drive stored other bytes than were sent (its MD5 differs from ours)."""

    transient = True  # sending again may succeed; the budget bounds it

    def __init__(self, message: str, file_id: str | None = None) -> None:
        super().__init__(message)
        self.file_id = file_id  # the damaged file, where Drive named it


def error_for(response: requests.Response) -> OSError:
    """The exception for an error response: 404 is FileNotFoundError."""
    reason, message = "", response.reason or ""
    try:
        error = response.json().get("error", {})
        message = str(error.get("message", message))
        errors = error.get("errors") or [{}]
        reason = str(errors[0].get("reason", ""))
    except (ValueError, AttributeError, IndexError):
        pass
    message = redact(message)[:300]
    if response.status_code == 404:
        return FileNotFoundError(f"Drive API HTTP 404: {message}")
    return DriveHttpError(response.status_code, reason, message)


def quote(name: str) -> str:
    """A string literal of Drive's query language."""
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _limit(timeout: float | None) -> float:
    return REQUEST_TIMEOUT if timeout is None else max(0.1, min(timeout, 60.0))


def file_chunks(path: str, size: int = CHUNK) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while data := handle.read(size):
            yield data


class DriveApi:
    """Drive API v2/v3 calls on one authorised session; see the module docstring."""

    def __init__(self, credentials: Any, endpoint: str | None) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self.credentials = credentials
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        # google-auth ships no type hints.
        self.session = AuthorizedSession(credentials, refresh_status_codes=())  # type: ignore[no-untyped-call]
        self.last_date: float | None = None  # the newest response's Date header

    def call(
        self,
        method: str,
        path: str,
        *,
        timeout: float | None,
        ok: tuple[int, ...] = (200,),
        **kwargs: Any,
    ) -> requests.Response:
        """One request; an error status raises (:func:`error_for`)."""
        url = path if path.startswith("http") else self.endpoint + path
        response: requests.Response = self.session.request(  # type: ignore[no-untyped-call]
            method, url, timeout=_limit(timeout), **kwargs
        )
        date = response.headers.get("Date")
        if date:
            self.last_date = email.utils.parsedate_to_datetime(date).timestamp()
        if response.status_code in ok:
            return response
        error = error_for(response)
        response.close()
        raise error

    def json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.call(method, path, **kwargs).json()
        return result

    # --- metadata ------------------------------------------------------------

    def generate_id(self, *, timeout: float | None) -> str:
        reply = self.json(
            "GET",
            "/drive/v2/files/generateIds",
            params={"maxResults": 1, "space": "drive"},
            timeout=timeout,
        )
        return str(reply["ids"][0])

    def get(
        self, file_id: str, fields: str, *, timeout: float | None
    ) -> dict[str, Any]:
        return self.json(
            "GET",
            f"/drive/v3/files/{file_id}",
            params={"fields": fields, **ALL_DRIVES},
            timeout=timeout,
        )

    def etag(self, file_id: str, *, timeout: float | None) -> str:
        """The file's v2 etag (v3 has none): what ``If-Match`` compares."""
        reply = self.json(
            "GET",
            f"/drive/v2/files/{file_id}",
            params={"fields": "etag", **ALL_DRIVES},
            timeout=timeout,
        )
        return str(reply["etag"])

    def children(
        self, query: str, fields: str, *, timeout: float | None
    ) -> list[dict[str, Any]]:
        """Every file matching ``query`` (all pages)."""
        found: list[dict[str, Any]] = []
        params = {
            "q": query,
            "fields": f"nextPageToken,files({fields})",
            "pageSize": "1000",
            "includeItemsFromAllDrives": "true",
            **ALL_DRIVES,
        }
        while True:
            reply = self.json("GET", "/drive/v3/files", params=params, timeout=timeout)
            found.extend(reply.get("files", []))
            token = reply.get("nextPageToken")
            if not token:
                return found
            params["pageToken"] = token

    def create_folder(
        self,
        name: str,
        parent: str,
        *,
        properties: dict[str, str] | None = None,
        timeout: float | None,
    ) -> str:
        body: dict[str, Any] = {
            "name": name,
            "mimeType": FOLDER_MIME,
            "parents": [parent],
        }
        if properties:
            body["appProperties"] = properties
        reply = self.json(
            "POST",
            "/drive/v3/files",
            params={"fields": "id", **ALL_DRIVES},
            json=body,
            timeout=timeout,
        )
        return str(reply["id"])

    def update_metadata(
        self,
        file_id: str,
        *,
        properties: dict[str, str] | None = None,
        trashed: bool | None = None,
        keep_modified: str | None = None,
        timeout: float | None,
    ) -> None:
        """Change a file's metadata (no new revision of its content).

        Args:
            properties: ``appProperties`` to add (Drive merges them by key).
            trashed: move the file into the Drive trash, or out of it.
            keep_modified: the file's ``modifiedTime`` to keep (Drive would
                stamp the change), where its stamps mean something.
        """
        body: dict[str, Any] = {}
        if properties is not None:
            body["appProperties"] = properties
        if trashed is not None:
            body["trashed"] = trashed
        if keep_modified is not None:
            body["modifiedTime"] = keep_modified
        self.call(
            "PATCH",
            f"/drive/v3/files/{file_id}",
            params={"fields": "id", **ALL_DRIVES},
            json=body,
            timeout=timeout,
        )

    def touch(self, file_id: str, *, timeout: float | None) -> None:
        """Set modifiedTime to Drive's clock now (v2 ``files.touch``), no revision."""
        self.call(
            "POST",
            f"/drive/v2/files/{file_id}/touch",
            params={"fields": "modifiedDate", **ALL_DRIVES},
            timeout=timeout,
        )

    def delete(self, file_id: str, *, timeout: float | None) -> None:
        """Delete for good (``files.delete``; the trash would still fill the quota)."""
        try:
            self.call(
                "DELETE",
                f"/drive/v3/files/{file_id}",
                params=ALL_DRIVES,
                ok=(200, 204),
                timeout=timeout,
            )
        except FileNotFoundError:
            pass

    def server_time(self, *, timeout: float | None) -> float:
        """The ``Date`` header of an ``about`` request (1 s steps: the midpoint)."""
        self.call("GET", "/drive/v3/about", params={"fields": "kind"}, timeout=timeout)
        assert self.last_date is not None, "Drive sent no Date header"
        return self.last_date + 0.5

    # --- content -------------------------------------------------------------

    def download(
        self, file_id: str, *, timeout: float | None, first_bytes: int | None = None
    ) -> requests.Response:
        """A streaming media GET (``first_bytes``: a Range request for those)."""
        headers = {"Range": f"bytes=0-{first_bytes - 1}"} if first_bytes else {}
        return self.call(
            "GET",
            f"/drive/v3/files/{file_id}",
            params={"alt": "media", **ALL_DRIVES},
            headers=headers,
            ok=(200, 206, 416),
            stream=True,
            timeout=timeout,
        )

    def create(
        self,
        metadata: dict[str, Any],
        data: bytes | None,
        path: str | None,
        *,
        timeout: float | None,
    ) -> dict[str, Any]:
        """Upload a new file (bytes or a local file); checked by MD5.

        A file that arrived damaged is deleted before the error is raised,
        so nothing a later listing finds can be adopted as the record.
        """
        try:
            return self._upload(
                "POST", "/upload/drive/v3/files", metadata, data, path, timeout
            )
        except UploadChecksumError as exc:
            if exc.file_id:
                self.delete(exc.file_id, timeout=timeout)
            raise

    def replace(
        self,
        file_id: str,
        data: bytes | None,
        path: str | None,
        *,
        timeout: float | None,
    ) -> dict[str, Any]:
        """Replace a file's content (a new revision; metadata kept); checked by MD5."""
        return self._upload(
            "PATCH", f"/upload/drive/v3/files/{file_id}", None, data, path, timeout
        )

    def replace_if_match(
        self, file_id: str, data: bytes, etag: str, *, timeout: float | None
    ) -> bool:
        """Replace the content only if the file's etag is still ``etag`` (v2).

        Returns:
            False when Drive answered 412: someone changed it since.
        """
        try:
            reply = self.json(
                "PUT",
                f"/upload/drive/v2/files/{file_id}",
                params={"uploadType": "media", **ALL_DRIVES},
                data=data,
                headers={"If-Match": etag, "Content-Type": "application/json"},
                timeout=timeout,
            )
        except DriveHttpError as exc:
            if exc.status == 412:
                return False
            raise
        check_md5(reply.get("md5Checksum"), hashlib.md5(data).hexdigest(), file_id)
        return True

    def _upload(
        self,
        method: str,
        url: str,
        metadata: dict[str, Any] | None,
        data: bytes | None,
        path: str | None,
        timeout: float | None,
    ) -> dict[str, Any]:
        params = {"fields": "id,md5Checksum,size", **ALL_DRIVES}
        size = len(data) if data is not None else os.path.getsize(str(path))
        if size > MULTIPART_LIMIT and path is not None:
            reply, md5 = self._resumable(
                method, url, metadata, path, size, params, timeout
            )
        else:
            if data is None:
                with open(str(path), "rb") as handle:
                    data = handle.read()  # small: under MULTIPART_LIMIT
            md5 = hashlib.md5(data).hexdigest()
            if metadata is None:
                reply = self.json(
                    method,
                    url,
                    params={"uploadType": "media", **params},
                    data=data,
                    headers={"Content-Type": "application/octet-stream"},
                    timeout=timeout,
                )
            else:
                boundary = uuid.uuid4().hex
                body = b"".join(
                    [
                        f"--{boundary}\r\nContent-Type: application/json; "
                        f"charset=UTF-8\r\n\r\n".encode(),
                        json.dumps(metadata).encode(),
                        f"\r\n--{boundary}\r\nContent-Type: "
                        f"application/octet-stream\r\n\r\n".encode(),
                        data,
                        f"\r\n--{boundary}--\r\n".encode(),
                    ]
                )
                reply = self.json(
                    method,
                    url,
                    params={"uploadType": "multipart", **params},
                    data=body,
                    headers={"Content-Type": f"multipart/related; boundary={boundary}"},
                    timeout=timeout,
                )
        file_id = reply.get("id")
        check_md5(reply.get("md5Checksum"), md5, str(file_id) if file_id else None)
        return reply

    def _resumable(
        self,
        method: str,
        url: str,
        metadata: dict[str, Any] | None,
        path: str,
        size: int,
        params: dict[str, str],
        timeout: float | None,
    ) -> tuple[dict[str, Any], str]:
        """A resumable session, the file sent in CHUNK pieces read from disk.

        A chunk that fails fails the call: the retry starts a new session
        (simple, and a shard is one chunk or a few).
        """
        start = self.call(
            method,
            url,
            params={"uploadType": "resumable", **params},
            json=metadata or {},
            headers={"X-Upload-Content-Length": str(size)},
            timeout=timeout,
        )
        session_url = start.headers["Location"]
        md5 = hashlib.md5()
        offset = 0
        for chunk in file_chunks(path):
            md5.update(chunk)
            last = offset + len(chunk) - 1
            try:
                response = self.call(
                    "PUT",
                    session_url,
                    data=chunk,
                    ok=(200, 201, 308),
                    headers={"Content-Range": f"bytes {offset}-{last}/{size}"},
                    timeout=timeout,
                )
            except FileNotFoundError:
                # Drive's answer to an expired session ("restart the upload"):
                # transient, and the retry opens a new session.
                raise DriveHttpError(
                    503, "uploadSessionExpired", "the resumable upload session expired"
                ) from None
            offset = last + 1
            if response.status_code != 308:
                if offset != size:
                    raise DriveHttpError(500, "uploadIncomplete", "session ended early")
                return response.json(), md5.hexdigest()
        raise DriveHttpError(500, "uploadIncomplete", f"{path} changed while sent")


def check_md5(theirs: Any, ours: str, file_id: str | None) -> None:
    """Raise :class:`UploadChecksumError` unless Drive's MD5 is ours."""
    if theirs != ours:
        raise UploadChecksumError(
            f"Drive's md5Checksum of file {file_id} is {theirs}, the bytes sent "
            f"have {ours}: they did not arrive intact",
            file_id,
        )

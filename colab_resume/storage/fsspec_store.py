"""A store on any fsspec filesystem (``memory://`` for tests, ``s3://``...).

The base of the local and GCS stores too: each primitive is one fsspec
call, and the subclasses replace the few that their storage does better
or must do differently.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import fsspec

from colab_resume.storage.checksum import StreamingCrc32c
from colab_resume.storage.store_contract import ObjectInfo, Store

Limit = dict[str, Any]  # keyword arguments that bound one fsspec call


class FsspecStore(Store):
    """A run directory on an fsspec filesystem; see :class:`Store`.

    Attributes:
        fs: the fsspec filesystem (tests and benchmarks reach past the
            protocol with it).
    """

    def __init__(
        self, url: str, protocol: str, root: str, storage_options: dict[str, Any]
    ) -> None:
        super().__init__(url, protocol, root, storage_options)
        options = dict(storage_options)
        options.setdefault("skip_instance_cache", True)
        self.fs: Any = self._open(options)

    def _open(self, options: dict[str, Any]) -> Any:
        return fsspec.filesystem(self.protocol, **options)

    def _limit(self, timeout: float | None) -> Limit:
        """``timeout=`` for an async filesystem (its client may retry inside)."""
        if timeout is None or not getattr(self.fs, "async_impl", False):
            return {}
        return {"timeout": timeout}

    def server_time(self, *, timeout: float | None = None) -> float:
        # The clock of this machine is the one that stamps memory's objects.
        return time.time()

    def exists(self, rel: str, *, timeout: float | None = None) -> bool:
        found: bool = self.fs.isfile(self.path(rel), **self._limit(timeout))
        return found

    def read(
        self, rel: str, *, max_bytes: int | None = None, timeout: float | None = None
    ) -> bytes:
        path = self.path(rel)
        if max_bytes is None:
            whole: bytes = self.fs.cat_file(path, **self._limit(timeout))
            return whole
        head: bytes = self.fs.cat_file(
            path, start=0, end=max_bytes + 1, **self._limit(timeout)
        )
        return head

    def info(self, rel: str, *, timeout: float | None = None) -> ObjectInfo:
        raw = self.fs.info(self.path(rel), **self._limit(timeout))
        return self._object_info(raw)

    def list(self, prefix: str, *, timeout: float | None = None) -> list[ObjectInfo]:
        try:
            found: dict[str, dict[str, Any]] = self.fs.find(
                self.path(prefix), detail=True, withdirs=False, **self._limit(timeout)
            )
        except FileNotFoundError:
            return []
        return [self._object_info(raw) for raw in found.values()]

    def write(
        self,
        rel: str,
        data: bytes,
        *,
        create_only: bool,
        write_id: str,
        timeout: float | None = None,
    ) -> None:
        mode = "create" if create_only else "overwrite"
        self.fs.pipe_file(self.path(rel), data, mode=mode, **self._limit(timeout))

    def put_file(
        self,
        local_path: str,
        rel: str,
        *,
        timeout: float | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        # fsspec's generic put copies in blocks of its own; GCS overrides.
        self.fs.put_file(local_path, self.path(rel), **self._limit(timeout))

    def get_file(
        self, rel: str, local_path: str, *, timeout: float | None = None
    ) -> None:
        self.fs.get_file(self.path(rel), local_path, **self._limit(timeout))

    def get_file_checked(
        self, rel: str, local_path: str, *, timeout: float | None = None
    ) -> tuple[int, str]:
        checksum = StreamingCrc32c()
        with (
            self.fs.open(self.path(rel), "rb") as source,
            open(local_path, "wb") as target,
        ):
            while data := source.read(1 << 20):
                target.write(data)
                checksum.update(data)
        return checksum.size, checksum.value

    def delete(self, rel: str, *, timeout: float | None = None) -> None:
        try:
            self.fs.rm_file(self.path(rel), **self._limit(timeout))
        except FileNotFoundError:
            pass

    def _object_info(self, raw: dict[str, Any]) -> ObjectInfo:
        name = raw["name"]
        rel = name[len(self.root) + 1 :] if name.startswith(self.root + "/") else name
        return ObjectInfo(
            path=rel,
            size=int(raw.get("size") or 0),
            updated=_timestamp(raw),
            crc32c=raw.get("crc32c"),
        )


def _timestamp(raw: dict[str, Any]) -> float:
    """Modification time from an fsspec info dict, whichever backend made it."""
    for key in ("updated", "mtime", "created", "LastModified"):
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.timezone.utc)
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return datetime.datetime.fromisoformat(
                value.replace("Z", "+00:00")
            ).timestamp()
    return 0.0

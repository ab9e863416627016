"""What an offline W&B run wrote: its history, read back from its ``.wandb`` file.

Offline (``WANDB_MODE=offline``), every session writes its own
``offline-run-<time>-<id>`` folder, and ``wandb.init(resume=...)`` cannot
ask a server how far the run got. So a session reads the earlier offline
folders of the same run id to learn the last step they logged. The file
is W&B's transaction log: a 7-byte header (``:W&B``, magic, version), then
LevelDB-log records in 32 KiB blocks (CRC, length, type: whole, first,
middle, last), each a ``wandb_internal_pb2.Record``.

Every fragment's checksum is checked before its bytes are used. W&B's own
reader (its ``datastore``) computes it as the plain CRC-32 of zlib
(IEEE) over the type byte then the data, unmasked, which is what its
writer puts there (checked on the files of the version these tests
install); LevelDB proper would use a masked CRC-32C. A fragment whose
checksum differs is damage: it is skipped, with the record it belonged
to, and said (``damage``, and a warning in the log), never trusted: a
damaged ``_step`` could make a resumed session leave out every step.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

_HEADER = 7
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def checksum(kind: int, chunk: bytes) -> int:
    """A fragment's checksum as W&B writes it: CRC-32 of its type, then its data."""
    return zlib.crc32(chunk, zlib.crc32(bytes((kind,)))) & 0xFFFFFFFF


def frames(data: bytes) -> Iterator[tuple[int, int, bytes, bool]]:
    """Each fragment of a ``.wandb`` file's bytes: (offset, type, data,
    checksum matches); a torn tail ends it."""
    offset = _HEADER
    while offset + 7 <= len(data):
        left_in_block = _BLOCK - offset % _BLOCK
        if left_in_block < 7:  # the block's padding
            offset += left_in_block
            continue
        crc, length, kind = struct.unpack_from("<IHB", data, offset)
        if crc == length == kind == 0:
            return  # zeros past the end a killed writer left: no record
        start = offset + 7
        if start + length > len(data) or length > left_in_block - 7:
            return  # written up to here when the process died
        chunk = data[start : start + length]
        yield offset, kind, chunk, crc == checksum(kind, chunk)
        offset = start + length


def records(path: str, damage: list[str] | None = None) -> Iterator[bytes]:
    """The payloads of a ``.wandb`` file, whole, in order; a torn tail ends it.

    Args:
        path: the file.
        damage: where each damaged fragment is said (its offset); the record
            it belongs to is left out.
    """
    with open(path, "rb") as handle:
        data = handle.read()
    if not data.startswith(b":W&B"):
        return
    pending: bytes | None = None
    for offset, kind, chunk, intact in frames(data):
        if not intact:
            said = f"{path}: the record at byte {offset} fails its checksum"
            log.warning("W&B file damaged, record left out: %s", said)
            if damage is not None:
                damage.append(said)
            pending = None  # the record it belongs to is damaged whole
            continue
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE and pending is not None:
            pending += chunk
        elif kind == _LAST and pending is not None:
            yield pending + chunk
            pending = None
        elif kind not in (_MIDDLE, _LAST):
            return


def _value(item: Any) -> Any:
    if item.value_json:
        return json.loads(item.value_json)
    oneofs = item.DESCRIPTOR.oneofs_by_name
    kind = item.WhichOneof("value") if "value" in oneofs else None
    return getattr(item, kind) if kind else None


def history(path: str, damage: list[str] | None = None) -> list[dict[str, Any]]:
    """The history rows of one ``.wandb`` file (each with its ``_step``);
    damaged records are left out and said in ``damage``."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for payload in records(path, damage):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        try:
            record.ParseFromString(payload)
        except Exception:  # a record this reader does not know: not history
            continue
        if record.WhichOneof("record_type") != "history":
            continue
        # A key is ``key``, or its parts in ``nested_key`` (``key`` empty).
        row = {
            "/".join(part for part in (item.key, *item.nested_key) if part): (
                _value(item)
            )
            for item in record.history.item
        }
        rows.append(row)
    return rows


def offline_files(wandb_dir: str, run_id: str) -> list[str]:
    """The ``.wandb`` files of every offline session of ``run_id``, oldest first."""
    pattern = os.path.join(wandb_dir, f"offline-run-*-{run_id}", f"run-{run_id}.wandb")
    return sorted(glob.glob(pattern))


def last_logged_step(wandb_dir: str, run_id: str, *, besides: str | None) -> int | None:
    """The last ``_step`` the earlier offline sessions of ``run_id`` logged.

    ``besides``: this session's own file, left out.
    """
    last = None
    for path in offline_files(wandb_dir, run_id):
        if besides is not None and os.path.abspath(path) == os.path.abspath(besides):
            continue
        for row in history(path):
            step = row.get("_step")
            if isinstance(step, (int, float)) and (last is None or step > last):
                last = int(step)
    return last


def config(path: str, damage: list[str] | None = None) -> dict[str, Any]:
    """The config one ``.wandb`` file records: what its run began with,
    then each update, in order."""
    from wandb.proto import wandb_internal_pb2

    found: dict[str, Any] = {}
    for payload in records(path, damage):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        try:
            record.ParseFromString(payload)
        except Exception:  # a record this reader does not know: not config
            continue
        kind = record.WhichOneof("record_type")
        if kind not in ("run", "config"):
            continue
        # The run record holds the config it began with; config records, updates.
        updates = record.run.config.update if kind == "run" else record.config.update
        for item in updates:
            key = "/".join(part for part in (item.key, *item.nested_key) if part)
            try:
                found[key] = json.loads(item.value_json)
            except ValueError:
                continue
    return found

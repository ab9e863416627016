"""The index of a gdrive:// run folder: its format, limits and stamps.

``.colab-resume-index.json`` maps each object's path to its file id:
``{"format": 2, "files": {"run.json": "1AbC..."}}`` (format 1: made before
files carried proof of their run). It is a cache of what the files prove
(:mod:`colab_resume.storage.drive_proof`); this module reads it strictly,
so an index that is not one is named as damaged (:class:`DamagedIndexError`),
never taken for an empty run, and rebuilds it from the proven files
(:func:`claimed`). Knows nothing of folders or sessions.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from colab_resume.errors import CorruptRecordError
from colab_resume.parsing import MAX_RECORD_BYTES
from colab_resume.storage import drive_proof as proof
from colab_resume.storage.drive_api import DriveApi

INDEX_NAME = ".colab-resume-index.json"
INDEX_FORMAT = 2  # 1: before provenance (a legacy folder's)
# An index is read with the limit of every other record of the run.
MAX_INDEX_BYTES = MAX_RECORD_BYTES


class DamagedIndexError(CorruptRecordError):
    """The index could not be read as an index (the text says why)."""


def parse_time(text: str) -> float:
    """An RFC 3339 time as Drive writes it, in epoch seconds."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def touched(raw: dict[str, Any]) -> bool:
    """Whether the file was stamped after its upload (claimed, or overwritten)."""
    return parse_time(raw["modifiedTime"]) > parse_time(raw["createdTime"])


def oldest(found: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one of several same-named files every reader picks."""
    if not found:
        return None
    return min(found, key=lambda item: (parse_time(item["createdTime"]), item["id"]))


def claimed(files: list[dict[str, Any]]) -> dict[str, str]:
    """The index the proven files make: each claimed file by its path.

    Of two claimed files of one path (two sessions that both lost their
    index), the oldest, as every reader picks.
    """
    by_path: dict[str, list[dict[str, Any]]] = {}
    for raw in files:
        rel = proof.path_of(raw)
        if rel is not None and touched(raw):
            by_path.setdefault(rel, []).append(raw)
    return {rel: str(min(found, key=_age)["id"]) for rel, found in by_path.items()}


def _age(raw: dict[str, Any]) -> tuple[float, str]:
    return parse_time(raw["createdTime"]), str(raw["id"])


def read(
    api: DriveApi, index_id: str, where: str, timeout: float | None
) -> dict[str, str]:
    """The entries of the index file ``index_id``; read to the limit only.

    Whether or not the server honours the range, no more than
    :data:`MAX_INDEX_BYTES` + 1 bytes are held: an index grown huge is
    named as damaged, never read whole.
    """
    limit = MAX_INDEX_BYTES + 1
    data = bytearray()
    with api.download(index_id, timeout=timeout, first_bytes=limit) as response:
        if response.status_code != 416:  # 416: no range of an empty file
            for block in response.iter_content(1 << 16):
                data += block
                if len(data) >= limit:
                    break
    return decode(bytes(data[:limit]), where)


def encode(entries: dict[str, str]) -> bytes:
    return json.dumps(
        {"format": INDEX_FORMAT, "files": entries}, sort_keys=True
    ).encode()


def decode(data: bytes, where: str) -> dict[str, str]:
    """The entries of an index; DamagedIndexError naming what is wrong."""
    if len(data) > MAX_INDEX_BYTES:
        raise DamagedIndexError(f"{where} is larger than {MAX_INDEX_BYTES} bytes")
    if not data:
        return {}
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        raise DamagedIndexError(f"{where} is not JSON") from None
    if not isinstance(value, dict) or value.get("format") not in (1, INDEX_FORMAT):
        raise DamagedIndexError(f"{where} is not a colab_resume index")
    files = value.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(rel, str) and isinstance(fid, str) and rel and fid
        for rel, fid in files.items()
    ):
        raise DamagedIndexError(f"{where} does not map paths to file ids")
    return dict(files)

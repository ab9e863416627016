"""The portable format's files: safetensors shards of named host arrays.

Tensors are named ``<group>/<position>`` (``model/000003``) and split into
shards of about ``shard_bytes``: ``ckpt.safetensors`` when one shard holds
them all, else ``ckpt.00000-of-00003.safetensors``... One file is written
by :mod:`.shard_write` (each array's own buffer, no copy) and read by
:mod:`.shard_file` (one verified copy, views into it).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from typing import Any

from colab_resume.checkpoint.formats.portable.dtypes import dtype_of_code
from colab_resume.checkpoint.formats.portable.shard_file import (
    header_limit,
    read_views,
)
from colab_resume.checkpoint.formats.portable.shard_write import write_shard
from colab_resume.protocol.manifest import FileEntry

SUFFIX = ".safetensors"

# How many tensors a shard read without its manifest may hold (tools and
# tests): bounds its header at about 16 MiB.
UNLISTED_TENSORS = 1 << 14


def tensor_name(group: str, index: int) -> str:
    return f"{group}/{index:06d}"


def shard_names(base: str, count: int) -> list[str]:
    """The file names (without directory) of ``count`` shards of ``base``."""
    if count == 1:
        return [base + SUFFIX]
    return [f"{base}.{i:05d}-of-{count:05d}{SUFFIX}" for i in range(count)]


def write_arrays(path: str, arrays: dict[str, Any]) -> tuple[int, str]:
    """Write name -> host array to ``path`` as safetensors; its size and CRC32C."""
    return write_shard(path, arrays)


def plan_shards(nbytes: Sequence[int], shard_bytes: int) -> list[range]:
    """Consecutive runs of tensors (by position) of about ``shard_bytes`` each."""
    runs: list[range] = []
    start = size = 0
    for i, n in enumerate(nbytes):
        if i > start and size + n > shard_bytes:
            runs.append(range(start, i))
            start, size = i, 0
        size += n
    runs.append(range(start, len(nbytes)))
    return runs


def write_shards(
    prefix: str, arrays: dict[str, Any], shard_bytes: int
) -> dict[str, tuple[int, str]]:
    """Write ``arrays`` next to ``prefix`` in shards of about ``shard_bytes``.

    Each shard's arrays are dropped from ``arrays`` once it is written, so
    a caller that holds them nowhere else frees them shard by shard.

    Returns:
        file name -> (size, CRC32C) of each shard, as written.
    """
    names = list(arrays)
    runs = plan_shards([int(arrays[n].nbytes) for n in names], shard_bytes)
    directory, base = os.path.split(prefix)
    written: dict[str, tuple[int, str]] = {}
    for file_name, run in zip(shard_names(base, len(runs)), runs, strict=True):
        shard = {names[i]: arrays.pop(names[i]) for i in run}
        written[file_name] = write_shard(os.path.join(directory, file_name), shard)
        del shard  # this shard's snapshot buffers can go now
    return written


def read_arrays(
    path: str, *, tensors: int = UNLISTED_TENSORS, entry: FileEntry | None = None
) -> dict[str, Any]:
    """The arrays of a safetensors file, by name, as read-only NumPy views
    of one verified copy (:mod:`.shard_file`).

    Args:
        path: the file.
        tensors: how many tensors its checkpoint lists (bounds its header).
        entry: its manifest entry; its size and CRC32C are checked over the
            bytes the views show.

    Raises:
        DamagedShardError: the file is damaged, or not the one ``entry`` lists.
    """
    return read_views(
        path,
        dtype_of_code,
        max_header_bytes=header_limit(tensors),
        size=None if entry is None else entry.size,
        crc32c=None if entry is None else entry.crc32c,
    )


def read_shards(
    prefix: str,
    *,
    files: Sequence[FileEntry] | None = None,
    tensors: int = UNLISTED_TENSORS,
    arrived: Callable[[str], dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """Every tensor of the shards next to ``prefix``, by name.

    Args:
        prefix: the checkpoint prefix (its directory holds the shards).
        files: the manifest's entries: exactly its shards are read, each
            checked against its entry. None: whatever shards lie there.
        tensors: how many tensors the checkpoint lists (bounds each header).
        arrived: called with a shard's name before it is read; blocks until
            it is downloaded and verified (the next ones download meanwhile),
            and returns its tensors where it was read already (as this
            reads it), else None.
    """
    directory, base = os.path.split(prefix)
    if files is None:
        pattern = os.path.join(glob.escape(directory), glob.escape(base) + "*" + SUFFIX)
        found: list[tuple[str, FileEntry | None]] = [
            (path, None) for path in sorted(glob.glob(pattern))
        ]
    else:
        found = [
            (os.path.join(directory, f.name), f)
            for f in files
            if f.name.endswith(SUFFIX)
        ]
    arrays: dict[str, Any] = {}
    for path, entry in found:
        early = arrived(os.path.basename(path)) if arrived is not None else None
        arrays.update(
            early
            if early is not None
            else read_arrays(path, tensors=tensors, entry=entry)
        )
    return arrays

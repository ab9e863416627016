"""Reading one safetensors file into memory of our own, verified as it is read.

The format (documented with the safetensors project): 8 bytes, the header's
length as a little-endian unsigned 64-bit integer; the header, a JSON
object of ``name -> {"dtype", "shape", "data_offsets": [begin, end]}``
(offsets into the bytes after the header) plus an optional
``__metadata__``; then the tensors' raw little-endian bytes.

``safetensors.deserialize`` reads the file into memory and then copies
every tensor out of it: for a 400 MB checkpoint two copies, most of a
restore's read phase. Here the file is read once, in large chunks, into
one buffer this process owns, its CRC32C computed chunk by chunk while the
chunk is still in cache, and each tensor is a read-only NumPy view of that
buffer, so the only further copy is the one into the variable.

Why not map the file: the download's CRC32C was checked as it streamed,
but the file on the local disk can change after that check (another
process, a full or failing disk). A mapping shows such a change: values
that were never verified would be restored, and a file truncated under it
kills the process with SIGBUS. A buffer of our own cannot change once its
checksum matched, so what is verified is what is restored. The price: the
checkpoint's size in process memory until the variables hold the values,
and a copy and a checksum pass more than a mapping (about a tenth of a
second per 200 MB on a loaded two-core machine).

Every offset and size is checked against the file before use, and the
header's length against a bound before it is read: a damaged file is
refused with what is wrong, never read out of bounds, and a huge header
(the format allows 100 MiB; parsing JSON costs tens of times its size in
memory) is refused without being read.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable
from typing import Any

from colab_resume.checkpoint.errors import DamagedCheckpointError
from colab_resume.storage.checksum import StreamingCrc32c

_HEADER_LENGTH = struct.Struct("<Q")
# One tensor's header entry ({"dtype":"F32","shape":[1024,1024],
# "data_offsets":[...]} and its name) takes about a hundred bytes; the
# allowance leaves room for long group names and many dimensions.
HEADER_BYTES_PER_TENSOR = 1 << 10
# __metadata__, alignment padding.
HEADER_BASE_BYTES = 64 << 10
_CHUNK = 8 << 20


class DamagedShardError(DamagedCheckpointError, ValueError):
    """A safetensors file whose header or offsets do not describe its bytes."""


def header_limit(tensors: int) -> int:
    """Most header bytes a shard of a checkpoint of ``tensors`` tensors may have.

    Args:
        tensors: how many tensors the checkpoint's manifest lists (a shard
            holds some of them).
    """
    return HEADER_BASE_BYTES + HEADER_BYTES_PER_TENSOR * max(0, tensors)


def read_views(
    path: str,
    dtype_of: Callable[[str], Any],
    *,
    max_header_bytes: int,
    size: int | None = None,
    crc32c: str | None = None,
) -> dict[str, Any]:
    """The tensors of ``path`` by name, as read-only NumPy views of our copy.

    Args:
        path: a safetensors file.
        dtype_of: safetensors dtype code (``"F32"``) -> NumPy dtype; raises
            ``KeyError`` for a code it does not know.
        max_header_bytes: a longer header is damage (see :func:`header_limit`).
        size: the file's size as its manifest lists it (None: not checked).
        crc32c: its CRC32C as its manifest lists it, checked over the bytes
            the views show (None: not checked).

    Raises:
        DamagedShardError: the file is not a well-formed safetensors file,
            or not the one its manifest lists.
    """
    import numpy as np

    with open(path, "rb", buffering=0) as handle:
        actual = os.fstat(handle.fileno()).st_size
        if size is not None and actual != size:
            raise DamagedShardError(
                f"{path}: {actual} bytes on the local disk, its manifest says "
                f"{size} (the file changed after its download was checked)"
            )
        if actual < _HEADER_LENGTH.size:
            raise DamagedShardError(f"{path}: {actual} bytes, too short for a header")
        (length,) = _HEADER_LENGTH.unpack(handle.read(_HEADER_LENGTH.size))
        start = _HEADER_LENGTH.size + length
        if start > actual:
            raise DamagedShardError(
                f"{path}: header of {length} bytes does not fit a {actual}-byte file"
            )
        if length > max_header_bytes:
            raise DamagedShardError(
                f"{path}: header of {length} bytes, more than the "
                f"{max_header_bytes} a shard of this checkpoint's tensors needs"
            )
        # The header first, and every entry checked against the file: a
        # header that claims what the file cannot hold is refused before the
        # whole file is read into memory.
        entries = _entries(path, handle.read(length), dtype_of, actual - start)
        handle.seek(0)
        buffer, checksum = _read_checked(handle, actual, path)
    if crc32c is not None and checksum != crc32c:
        raise DamagedShardError(
            f"{path}: CRC32C {checksum} on the local disk, its manifest says "
            f"{crc32c} (the file changed after its download was checked)"
        )
    if bytes(buffer[_HEADER_LENGTH.size : start]) != entries.raw:
        raise DamagedShardError(f"{path}: its header changed while it was read")
    arrays: dict[str, Any] = {}
    for name, (dtype, shape, begin) in entries.tensors.items():
        count = math.prod(shape)
        view = np.frombuffer(buffer, dtype=dtype, count=count, offset=start + begin)
        # A tuple shape: reshape([]) would leave a scalar as shape (1,).
        arrays[name] = view.reshape(shape)
    return arrays


class _Entries:
    """A header's tensors, checked: name -> (dtype, shape, first byte)."""

    def __init__(
        self, raw: bytes, tensors: dict[str, tuple[Any, tuple[int, ...], int]]
    ):
        self.raw, self.tensors = raw, tensors


def _entries(
    path: str, raw: bytes, dtype_of: Callable[[str], Any], body: int
) -> _Entries:
    """The header ``raw`` parsed, each entry checked against ``body`` bytes."""
    import numpy as np

    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DamagedShardError(f"{path}: unreadable header ({exc})") from None
    if not isinstance(header, dict):
        raise DamagedShardError(f"{path}: the header is not a JSON object")
    tensors: dict[str, tuple[Any, tuple[int, ...], int]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        code, shape, begin, end = _entry(path, name, entry)
        try:
            dtype = np.dtype(dtype_of(code))
        except KeyError:
            raise DamagedShardError(
                f"{path}: tensor {name} has dtype {code!r}, which no checkpoint "
                f"this version writes holds"
            ) from None
        count = math.prod(shape)
        if not 0 <= begin <= end <= body or end - begin != count * dtype.itemsize:
            raise DamagedShardError(
                f"{path}: tensor {name} ({code}{list(shape)}) claims bytes "
                f"{begin}..{end} of the {body} after the header"
            )
        tensors[name] = (dtype, shape, begin)
    return _Entries(raw, tensors)


def _entry(path: str, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
    """``(dtype code, shape, begin, end)`` of one header entry, checked for type."""

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    try:
        code, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    except (KeyError, TypeError):
        code = shape = offsets = None
    if (
        not isinstance(code, str)
        or not isinstance(shape, list)
        or not all(whole(d) for d in shape)
        or not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(whole(o) for o in offsets)
    ):
        raise DamagedShardError(f"{path}: tensor {name}'s entry is malformed")
    # A dimension NumPy cannot index cannot describe bytes of a real file;
    # with a zero beside it, the byte count alone would not tell.
    if any(d >= 1 << 62 for d in shape):
        raise DamagedShardError(f"{path}: tensor {name} has shape {shape}")
    return code, tuple(shape), offsets[0], offsets[1]


def _read_checked(handle: Any, size: int, path: str) -> tuple[Any, str]:
    """All ``size`` bytes of ``handle`` in a read-only buffer, and their CRC32C.

    Each chunk is checksummed right after it is read, while it is in cache.
    """
    import numpy as np

    buffer: Any = np.empty(size, dtype=np.uint8)
    checksum = StreamingCrc32c()
    done = 0
    while done < size:
        chunk = buffer[done : done + _CHUNK]
        got = handle.readinto(memoryview(chunk))
        if not got:
            raise DamagedShardError(
                f"{path}: ended after {done} of its {size} bytes while being read"
            )
        piece = chunk[:got]
        piece.flags.writeable = False  # google-crc32c takes read-only buffers
        checksum.update(piece)
        done += got
    buffer.flags.writeable = False
    return buffer, checksum.value

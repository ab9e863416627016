"""Reading one safetensors file without copying its tensors.

The format (documented with the safetensors project): 8 bytes, the header's
length as a little-endian unsigned 64-bit integer; the header, a JSON
object of ``name -> {"dtype", "shape", "data_offsets": [begin, end]}``
(offsets into the bytes after the header) plus an optional
``__metadata__``; then the tensors' raw little-endian bytes.

``safetensors.deserialize`` reads the file into memory and then copies
every tensor out of it: for a 400 MB checkpoint two copies, most of a
restore's read phase. Here the file is mapped and each tensor is a
read-only NumPy view of the mapping, so the only copy is the one into the
variable. Every offset and size is checked against the file before use: a
damaged file is refused with what is wrong, never read out of bounds.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Callable
from typing import Any

from colab_resume.checkpoint.errors import StructureMismatchError

_HEADER_LENGTH = struct.Struct("<Q")
MAX_HEADER_BYTES = 100 << 20  # the format's own limit


class DamagedShardError(ValueError):
    """A safetensors file whose header or offsets do not describe its bytes."""


def read_views(path: str, dtype_of: Callable[[str], Any]) -> dict[str, Any]:
    """The tensors of ``path`` by name, as read-only NumPy views of the file.

    Args:
        path: a safetensors file.
        dtype_of: safetensors dtype code (``"F32"``) -> NumPy dtype; raises
            ``KeyError`` for a code it does not know.

    Raises:
        DamagedShardError: the file is not a well-formed safetensors file.
        StructureMismatchError: it holds a dtype this version cannot read.
    """
    import numpy as np

    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        if size < _HEADER_LENGTH.size:
            raise DamagedShardError(f"{path}: {size} bytes, too short for a header")
        # An empty file cannot be mapped; one with a header can.
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    (length,) = _HEADER_LENGTH.unpack_from(mapping, 0)
    start = _HEADER_LENGTH.size + length
    if length > MAX_HEADER_BYTES or start > size:
        raise DamagedShardError(
            f"{path}: header of {length} bytes does not fit a {size}-byte file"
        )
    try:
        header = json.loads(bytes(mapping[_HEADER_LENGTH.size : start]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedShardError(f"{path}: unreadable header ({exc})") from None
    if not isinstance(header, dict):
        raise DamagedShardError(f"{path}: the header is not a JSON object")
    arrays: dict[str, Any] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            code, shape = entry["dtype"], tuple(int(d) for d in entry["shape"])
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise DamagedShardError(
                f"{path}: tensor {name}'s entry is malformed"
            ) from None
        try:
            dtype = np.dtype(dtype_of(code))
        except KeyError:
            raise StructureMismatchError(
                f"tensor {name} of {path} has dtype {code}, which this version "
                f"cannot read back."
            ) from None
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if not 0 <= begin <= end <= size - start or end - begin != nbytes:
            raise DamagedShardError(
                f"{path}: tensor {name} ({code}{list(shape)}) claims bytes "
                f"{begin}..{end} of the {size - start} after the header"
            )
        # A tuple shape: reshape([]) would leave a scalar as shape (1,).
        view = np.frombuffer(mapping, dtype=dtype, count=count, offset=start + begin)
        arrays[name] = view.reshape(shape)
    return arrays

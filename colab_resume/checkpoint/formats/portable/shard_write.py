"""Writing one safetensors file from host arrays, with no copy of the tensors.

The layout is the one :mod:`.shard_file` reads (and
the safetensors project documents): the header's length as 8 little-endian
bytes, the JSON header padded with spaces to a multiple of 8 bytes, then
each tensor's raw bytes, back to back in the header's order.

Why not ``safetensors.numpy.save_file``: the arrays here are views of the
snapshot's buffers (TensorFlow's on the CPU), and a save's peak memory is
the reason this module exists. Writing each array's own buffer to the file
in slices holds nothing more than the snapshot, and the CRC32C the manifest
lists is computed over each slice as it is written, while it is in cache:
the files are not read again to checksum them, and the checksum is that
of the values the snapshot held, so a file damaged on the local disk before
its upload is refused at restore instead of being committed as valid.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

from colab_resume.storage.checksum import StreamingCrc32c

_HEADER_LENGTH = struct.Struct("<Q")
# Slices written and checksummed at a time: small enough to stay in cache
# between the two, large enough that the per-call cost does not show.
_SLICE = 4 << 20

# NumPy dtype name -> safetensors dtype code (bfloat16 through ml_dtypes).
CODES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "uint64": "U64",
    "int32": "I32",
    "uint32": "U32",
    "int16": "I16",
    "uint16": "U16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def _raw(array: Any) -> Any:
    """The bytes of ``array`` as a flat read-only uint8 view (a copy only
    when the array is not C-contiguous or not little-endian)."""
    import numpy as np

    # Not np.ascontiguousarray: it turns a 0-d array (a scalar) into shape (1,).
    array = np.asarray(array, order="C")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    raw = array.reshape(-1).view(np.uint8)
    raw.flags.writeable = False  # google-crc32c takes read-only buffers only
    return raw


def header(arrays: Mapping[str, Any]) -> bytes:
    """The length prefix and padded JSON header for ``arrays``, in order.

    Raises:
        TypeError: an array's dtype has no safetensors code.
    """
    entries: dict[str, Any] = {}
    offset = 0
    for name, array in arrays.items():
        dtype = str(array.dtype)
        if dtype not in CODES:
            raise TypeError(f"tensor {name}: dtype {dtype} has no safetensors code")
        entries[name] = {
            "dtype": CODES[dtype],
            "shape": [int(d) for d in array.shape],
            "data_offsets": [offset, offset + int(array.nbytes)],
        }
        offset += int(array.nbytes)
    text = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return _HEADER_LENGTH.pack(len(text)) + text


def write_shard(path: str, arrays: Mapping[str, Any]) -> tuple[int, str]:
    """Write ``arrays`` (name -> host array) to ``path``.

    Returns:
        The file's size and its CRC32C (GCS style), as written.
    """
    checksum = StreamingCrc32c()
    with open(path, "wb", buffering=0) as handle:
        _write(handle, header(arrays), checksum)
        for array in arrays.values():
            raw = _raw(array)
            for start in range(0, raw.size, _SLICE):
                _write(handle, raw[start : start + _SLICE], checksum)
    return checksum.size, checksum.value


def _write(handle: Any, data: Any, checksum: StreamingCrc32c) -> None:
    # NumPy slices, not memoryviews: google-crc32c refuses a memoryview.
    checksum.update(data)
    view = memoryview(data)
    done = 0
    while done < view.nbytes:  # an unbuffered write may take part of it
        done += handle.write(view[done:])

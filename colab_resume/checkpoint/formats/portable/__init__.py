"""The portable format: safetensors shards of host arrays, read by both backends.

``state`` holds the training state's variables as arrays (:class:`ArrayState`),
``shards`` lays the arrays out in files, ``pieces`` names the pieces of a
sharded variable in them, ``dtypes`` maps their dtypes, and
``shard_file`` / ``shard_write`` read and write one file. :data:`FORMAT` is
what the registry (:mod:`colab_resume.checkpoint.formats`) hands out under
the name ``"portable"``.

Why safetensors: a well-kept, documented tensor format (a JSON header, then
raw little-endian bytes; no pickle, so loading a checkpoint runs no code),
readable by NumPy, JAX, PyTorch and TensorFlow alike, with a dtype of its
own for bfloat16 (``BF16``), which ``.npy`` files can only store as opaque
void bytes. The files are written and read here, without the safetensors
library: each array is written from its own buffer, and read as views of
one verified copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from colab_resume.checkpoint.formats.base import FormatSettings
from colab_resume.checkpoint.formats.portable.pieces import PIECES_ALLOWANCE
from colab_resume.checkpoint.formats.portable.shards import (
    SUFFIX,
    read_arrays,
    read_shards,
    write_arrays,
    write_shards,
)
from colab_resume.checkpoint.formats.portable.state import (
    ArrayState,
    NotPortableError,
    portable_groups,
)
from colab_resume.checkpoint.groups import StateLike
from colab_resume.protocol.manifest import FileEntry

__all__ = [
    "FORMAT",
    "ArrayState",
    "NotPortableError",
    "PortableFormat",
    "portable_groups",
    "read_arrays",
    "read_shards",
    "write_arrays",
    "write_shards",
]


@dataclasses.dataclass(frozen=True)
class PortableFormat:
    """See :class:`colab_resume.checkpoint.formats.Format`."""

    name: str = "portable"
    # Each shard is a whole safetensors file: read as soon as it arrives.
    reads_while_arriving: bool = True

    def writer(self, state: StateLike, settings: FormatSettings) -> ArrayState:
        return ArrayState(
            state,
            shard_bytes=settings.shard_bytes,
            write_behind=settings.write_behind,
            frozen=settings.frozen,
        )

    def reader(
        self, state: StateLike, settings: FormatSettings, writer: Any = None
    ) -> ArrayState:
        if isinstance(writer, ArrayState):
            return writer
        return ArrayState(state, frozen=settings.frozen)

    def read_file(self, path: str, entry: FileEntry, tensors: int) -> Any:
        """One shard's tensors, checked against ``entry`` (None: not a shard)."""
        if not entry.name.endswith(SUFFIX):
            return None
        # A sharded variable is stored as pieces: more tensors than listed.
        return read_arrays(path, tensors=tensors * PIECES_ALLOWANCE, entry=entry)


FORMAT = PortableFormat()

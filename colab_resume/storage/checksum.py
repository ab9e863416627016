"""CRC32C as GCS writes it: base64 of the big-endian 32-bit value.

GCS keeps this checksum for every object and reports it in listings; the
checkpoint manifest records the same form, so the two compare as strings.
The work is done in C by google-crc32c, which releases the GIL: computing
it on a background thread does not stall the training thread.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class StreamingCrc32c:
    """CRC32C of bytes fed in pieces (a download as it arrives, a file in chunks)."""

    def __init__(self) -> None:
        import google_crc32c

        # google_crc32c ships no type hints.
        self._checksum: Any = google_crc32c.Checksum()  # type: ignore[no-untyped-call]
        self.size = 0

    def update(self, data: ReadableBuffer) -> None:
        """Add ``data``: bytes, or any read-only buffer (a NumPy array...)."""
        self._checksum.update(data)
        self.size += memoryview(data).nbytes

    @property
    def value(self) -> str:
        """The CRC32C so far, GCS style."""
        return base64.b64encode(self._checksum.digest()).decode("ascii")

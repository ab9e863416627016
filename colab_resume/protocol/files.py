"""One file of a checkpoint, as its manifest lists it.

Below both the manifest (:mod:`colab_resume.protocol.manifest`) and the
shared objects a manifest references (:mod:`colab_resume.protocol.objects`),
which list their files the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["FileEntry", "check_plain_name"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileEntry:
    """One file of a checkpoint.

    Attributes:
        name: file name inside the checkpoint directory (no ``/``).
        size: bytes.
        crc32c: GCS-style CRC32C (base64, big-endian).
    """

    name: str
    size: int
    crc32c: str

    def __post_init__(self) -> None:
        check_plain_name("FileEntry.name", self.name)
        if not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"FileEntry.size must be an int >= 0, got {self.size!r}.")
        if not isinstance(self.crc32c, str) or len(self.crc32c) != 8:
            raise ValueError(
                f"FileEntry.crc32c must be 8 base64 characters, got {self.crc32c!r}."
            )


def check_plain_name(field: str, name: Any) -> None:
    if (
        not isinstance(name, str)
        or not name
        or name.startswith(".")
        or any(c in name for c in "/\\\0")
    ):
        raise ValueError(f"{field} must be a plain file name, got {name!r}.")

"""One-line errors, with the fix, for a local run directory's disk refusing.

A full disk, a read-only mount or a file system without hard links raise
a bare ``OSError`` deep in a write (``[Errno 28] No space left on device``)
that says neither which run directory nor what to do. The storage choke
point hands every permanent local failure here.
"""

from __future__ import annotations

import errno
import os
import shutil

from colab_resume.errors import (
    NoHardLinksError,
    ReadOnlyStorageError,
    StorageError,
    StorageFullError,
)

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def explain(exc: OSError, operation: str, root: str) -> StorageError | None:
    """The error to raise instead of ``exc``, or None to raise ``exc`` itself.

    Args:
        exc: what a local file operation raised, retries spent.
        operation: what was being done ("create lease/00000002.json").
        root: the local run directory.
    """
    if isinstance(exc, StorageError):
        return None  # already says what to do
    if exc.errno == errno.EROFS:
        return ReadOnlyStorageError(
            f"Cannot {operation} in {root}: it is on a read-only file system. "
            f"Point run_dir at a writable directory, or remount that disk "
            f"read-write."
        )
    if exc.errno in _FULL:
        what = "Disk quota exceeded" if exc.errno == errno.EDQUOT else "Disk full"
        return StorageFullError(
            f"{what}: cannot {operation} in {root} ({_free(root)} free). Free "
            f"space there, or lower keep= (committed checkpoints kept; the "
            f"newest is always kept), or point run_dir at a larger disk."
        )
    return None


def no_hard_links(exc: OSError, path: str) -> NoHardLinksError:
    """The error for ``os.link`` failing at ``path`` other than by a taken name."""
    return NoHardLinksError(
        f"Cannot create {path}: its file system does not make hard links "
        f"({os.strerror(exc.errno) if exc.errno else exc}), and colab_resume "
        f"creates records with one so that of two sessions exactly one wins. "
        f"Point run_dir at a local disk or a gs:// bucket (a FUSE mount of "
        f"cloud storage is not enough)."
    )


def _free(root: str) -> str:
    """Free space on ``root``'s disk, for the message ("3.2 MB")."""
    path = root
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        return f"{shutil.disk_usage(path or os.sep).free / 1e6:.1f} MB"
    except OSError:
        return "unknown space"

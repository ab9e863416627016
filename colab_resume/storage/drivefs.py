"""Local paths on the Google Drive mount, routed to the Drive API instead.

Colab's ``drive.mount('/content/drive')`` is DriveFS, a FUSE file system
that caches writes on the VM's disk and uploads them on its own schedule:
files written before a disconnect can be missing or stale in Drive
afterwards with no error raised (googlecolab/colabtools #287, #2607,
#5910), renames can be reverted or turn into ``name (1)`` copies (#4032),
and the mount can fail mid-run ("Transport endpoint is not connected",
#3441, #5970). Create-only, whole writes and the server's clock, which
the run-directory protocol rests on, do not hold there. So a run
directory on the mount is never used as a local path: the same folder is
opened through the Drive API (``/content/drive/MyDrive/x`` is
``gdrive://x``), and where that is impossible the run is refused with the
fix.

Recognised: a path under a mount whose ``/proc/mounts`` entry is DriveFS
(a FUSE file system of type ``fuse.drive``/``fuse.drivefs`` or from the
device ``drive``/``drivefs``), or under ``/content/drive`` (Colab's mount
point, mounted or not: unmounted, it is the VM's own disk, which a new VM
does not have).
"""

from __future__ import annotations

import logging
import os

from colab_resume.errors import UnsupportedURLError

log = logging.getLogger(__name__)

MOUNTS_FILE = "/proc/mounts"
COLAB_MOUNT = "/content/drive"
_DRIVEFS_TYPES = ("fuse.drive", "fuse.drivefs")
_DRIVEFS_DEVICES = ("drive", "drivefs")


def _unescape(field: str) -> str:
    """A /proc/mounts field: spaces and tabs are written as octal escapes."""
    for code, char in (
        ("\\040", " "),
        ("\\011", "\t"),
        ("\\012", "\n"),
        ("\\134", "\\"),
    ):
        field = field.replace(code, char)
    return field


def drivefs_mount(path: str, mounts_file: str | None = None) -> str | None:
    """The DriveFS mount point that holds ``path``, or None.

    Symlinks are followed (``ln -s /content/drive/MyDrive/runs runs`` is a
    common Colab idiom): a path that resolves into the mount is on it.
    """
    real = os.path.realpath(path)
    found: list[str] = []
    try:
        with open(mounts_file or MOUNTS_FILE, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []  # no mount table (not Linux): only the Colab path is known
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        device, point, kind = fields[0], _unescape(fields[1]), fields[2]
        drivefs = kind in _DRIVEFS_TYPES or (
            kind.startswith("fuse") and device in _DRIVEFS_DEVICES
        )
        if drivefs and _under(real, os.path.realpath(point)):
            found.append(os.path.realpath(point))
    if not found and _under(real, COLAB_MOUNT):
        found.append(COLAB_MOUNT)
    return max(found, key=len) if found else None


def _under(path: str, folder: str) -> bool:
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder + "/")


def route(path: str, mounts_file: str | None = None) -> str | None:
    """The ``gdrive://`` URL of ``path`` if it is on the Drive mount, else None.

    Raises:
        UnsupportedURLError: on the mount, but not in My Drive (a shared
            drive, the mount's root), whose folder the API cannot be told
            from the path alone; the message gives the URL form to use.
    """
    mount = drivefs_mount(path, mounts_file)
    if mount is None:
        return None
    inside = os.path.relpath(os.path.realpath(path), mount).replace(os.sep, "/")
    head, _, rest = inside.partition("/")
    if head != "MyDrive" or not rest.strip("/"):
        raise UnsupportedURLError(
            f"run_dir {path!r} is on the Google Drive mount ({mount}), which "
            f"colab_resume does not use: it caches writes and syncs them late "
            f"or never. Only folders under {mount}/MyDrive/ can be routed "
            f"through the Drive API by path; for a shared drive use "
            f"'gdrive://id:FOLDER_ID/runs/NAME' (the id is the last part of "
            f"the folder's web address)."
        )
    url = "gdrive://" + rest.strip("/")
    log.warning(
        "storage: run_dir %s is on the Google Drive mount, which loses and "
        "delays writes silently (googlecolab/colabtools#287); using the same "
        "folder through the Drive API: %s",
        path,
        url,
    )
    return url

"""Every error colab_resume raises on purpose.

Each message names the problem and the fix, because it is what users will
paste into a search box. All derive from :class:`ColabResumeError`.
"""

from __future__ import annotations


class ColabResumeError(Exception):
    """Base class of all errors raised by colab_resume."""


# --- storage --------------------------------------------------------------


class StorageError(ColabResumeError):
    """A problem reaching or using the run directory's storage."""


class UnsupportedURLError(StorageError, ValueError):
    """The run directory URL has a scheme we cannot open."""


class BucketNotFoundError(StorageError, FileNotFoundError):
    """The GCS bucket named in the run directory does not exist."""


class RunDirNotFoundError(StorageError, FileNotFoundError):
    """A local run directory that readers were pointed at does not exist."""


class NoCredentialsError(StorageError):
    """No Google credentials could be found for a ``gs://`` run directory."""


class TokenCheckFailedError(NoCredentialsError):
    """gcsfs could not check, or refused, a raw access token given as ``token=``.

    The message never holds the token: gcsfs's own error names the URL of
    its check, token included.
    """


class PermissionDeniedError(StorageError, PermissionError):
    """The credentials in use may not read or write the bucket."""


class StorageUnavailableError(StorageError, ConnectionError):
    """Transient storage faults outlasted the retry budget."""


class CorruptRecordError(StorageError, ValueError):
    """A record in the run directory is unreadable (bad JSON, too big, bad types)."""


class UnsafePathError(CorruptRecordError):
    """A local run directory holds a symlink, or a directory where a record belongs.

    colab_resume never follows a link inside the run directory (a write
    through it would land outside) and never treats a directory as a record.
    """


class ReadOnlyStorageError(StorageError, OSError):
    """A local run directory is on a read-only file system."""


class StorageFullError(StorageError, OSError):
    """A local run directory's disk is full, or its quota is spent."""


class NoHardLinksError(StorageError, OSError):
    """A local run directory's file system cannot make hard links.

    Sessions create records (leases, manifests) with a hard link, which
    fails atomically when the name is taken: of two sessions racing for a
    lease exactly one wins, and no reader ever sees half a record.
    """


class TooManyObjectsError(StorageError):
    """A listing of the run directory found more objects than the run makes."""


# --- run ownership ----------------------------------------------------------


class RunInUseError(ColabResumeError):
    """Another session holds the run and is still beating."""


class LeaseRaceError(ColabResumeError):
    """Another session took the run at the same moment; this one lost."""


class FencedError(ColabResumeError):
    """A newer session took the run; this one must stop writing."""


class RunMismatchError(ColabResumeError):
    """The run directory belongs to a different run than expected."""


class HeartbeatError(ColabResumeError):
    """Heartbeats kept failing; the run may be reported dead to others."""

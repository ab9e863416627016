"""Which store serves a URL scheme: the one place that tells them apart.

Kept apart from :mod:`colab_resume.storage.store_contract` (the primitives), so the
stores import the primitives and this registry imports the stores, never
the other way round.
"""

from __future__ import annotations

from colab_resume.storage.store_contract import DRIVE_PROTOCOLS, GCS_PROTOCOLS, Store


def store_class(protocol: str) -> type[Store]:
    """The kind of store for a URL scheme.

    Imported lazily: gcsfs and its HTTP stack load only for gs:// run
    directories.
    """
    if protocol == "file":
        from colab_resume.storage.local import LocalStore

        return LocalStore
    if protocol in GCS_PROTOCOLS:
        from colab_resume.storage.gcs import GcsStore

        return GcsStore
    if protocol in DRIVE_PROTOCOLS:
        from colab_resume.storage.drive import DriveStore

        return DriveStore
    from colab_resume.storage.fsspec_store import FsspecStore

    return FsspecStore

"""The gcsfs filesystem as the run directory uses it: one try per request.

gcsfs retries inside each request (up to 6 tries, sleeping 1, 2, 4... up
to 32 s between them), invisible to the caller. Under our
:class:`~colab_resume.storage.retry.RetryPolicy` that nested loop would
multiply attempts, hide every fault from the ``on_retry`` hook (so the
panel and the events never say that storage is struggling), and impose
backoffs far longer than a 30 s heartbeat can afford. This subclass runs
gcsfs's request methods without their retry wrapper, so the policy is the
one retry loop, with its own budget and backoff.

It also uses the plain gcsfs class rather than the one ``gcsfs.GCSFileSystem``
may alias: with ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` on (the default) that
one probes each bucket's type over gRPC, which costs a 60 s timeout per
bucket against an emulator. Our protocol needs no HNS features.
"""

from __future__ import annotations

import logging
from typing import Any

from gcsfs.core import GCSFileSystem

log = logging.getLogger(__name__)

# gcsfs methods decorated with its retry loop (gcsfs/retry.py: retry_request).
_RETRYING_METHODS = ("_request", "_get_file_request", "_get_file_concurrent")


def _single_try(name: str) -> Any:
    method = getattr(GCSFileSystem, name, None)
    inner = getattr(method, "__wrapped__", None)
    if inner is None:  # another gcsfs version: keep its retries, still correct
        log.debug("gcsfs %s has no retry wrapper to remove", name)
        return method
    return inner


class SingleTryGCSFileSystem(GCSFileSystem):  # type: ignore[misc]  # gcsfs: untyped
    """gcsfs with its inner retry loop removed; see the module docstring."""

    # Keep fsspec's instance cache apart from plain gcsfs instances.
    protocol = ("gs", "gcs")


for _name in _RETRYING_METHODS:
    if hasattr(GCSFileSystem, _name):
        setattr(SingleTryGCSFileSystem, _name, _single_try(_name))

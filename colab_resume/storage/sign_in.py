"""``cr.authenticate()``: sign in to Google where the run directory needs it.

Above both the URL rules (:func:`~colab_resume.storage.store.split_url`,
which asks the stores) and the credentials the stores use
(:mod:`colab_resume.storage.auth`), so that neither imports the other.
"""

from __future__ import annotations

import logging
from typing import Any

from colab_resume.storage import auth
from colab_resume.storage.store import split_url
from colab_resume.storage.store_contract import DRIVE_PROTOCOLS, GCS_PROTOCOLS

log = logging.getLogger(__name__)


def authenticate(project: str | None = None, *, run_dir: str | None = None) -> Any:
    """Obtain Google credentials for GCS and Drive and make them the default.

    In Colab this shows Colab's sign-in prompt
    (``google.colab.auth.authenticate_user``, which grants Drive access
    too); elsewhere it loads application-default credentials. Either way
    they are asked for with the Cloud Storage and the Drive scope, so
    ``gs://`` and ``gdrive://`` run directories both work with them.

    Args:
        project: the GCP project to bill; defaults to the credentials' own.
        run_dir: sign in only if this run directory needs Google's
            credentials (``gs://``, ``gdrive://``, a path on the Drive
            mount); for any other (a local path) do nothing and return
            None. One cell then serves every run directory.

    Returns:
        The ``google.auth`` credentials now used for ``gs://`` run
        directories (None: ``run_dir`` needs none).

    Raises:
        NoCredentialsError: none could be found; the message says how to
            get some.
    """
    if run_dir is not None and not needs_google_sign_in(run_dir):
        log.info("run_dir %s needs no Google sign-in", run_dir)
        return None
    return auth.sign_in(project)


def needs_google_sign_in(run_dir: str) -> bool:
    """Whether ``run_dir`` is on Cloud Storage or Google Drive (the mount too)."""
    protocol, _ = split_url(run_dir)
    return protocol in GCS_PROTOCOLS + DRIVE_PROTOCOLS

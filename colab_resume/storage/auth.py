"""Google credentials for ``gs://`` and ``gdrive://`` run directories.

Order of preference: credentials given explicitly (``storage_options``
``token=``), those set up by :func:`authenticate`, a storage emulator
(``STORAGE_EMULATOR_HOST``: anonymous), then application-default
credentials (``google.auth.default()``), which covers Colab after
``authenticate_user()``, ``gcloud auth application-default login``,
``GOOGLE_APPLICATION_CREDENTIALS`` and the metadata server of a Cloud VM.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, TypeGuard

from colab_resume.errors import NoCredentialsError, TokenCheckFailedError
from colab_resume.redact import redact, register_secret
from colab_resume.runtime.detect import in_colab

log = logging.getLogger(__name__)

_authenticated: Any = None  # credentials from sign_in(), used by default

HOW_TO_AUTHENTICATE = (
    "In Colab run `import colab_resume as cr; cr.authenticate()` (it calls "
    "google.colab.auth.authenticate_user()). Elsewhere run "
    "`gcloud auth application-default login`, or set "
    "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or pass "
    "storage_options={'token': '/path/to/key.json'}. For a storage emulator "
    "pass storage_options={'token': 'anon', 'endpoint_url': 'http://host:port'}."
)


def sign_in(project: str | None = None) -> Any:
    """Obtain Google credentials for GCS and Drive and make them the default.

    What :func:`colab_resume.storage.sign_in.authenticate` does once it has
    decided the run directory needs them.

    Raises:
        NoCredentialsError: none could be found; the message says how to
            get some.
    """
    global _authenticated
    if in_colab():
        from google.colab import auth as colab_auth

        colab_auth.authenticate_user(project_id=project)
    credentials, default_project = _default_credentials(GCS_SCOPES + DRIVE_SCOPES)
    _authenticated = credentials
    log.info(
        "authenticated as %s (project %s)",
        describe_principal(credentials),
        project or default_project,
    )
    return credentials


GCS_SCOPES = ["https://www.googleapis.com/auth/devstorage.read_write"]


def _default_credentials(scopes: list[str] | None = None) -> tuple[Any, str | None]:
    import google.auth
    import google.auth.exceptions

    try:
        return google.auth.default(scopes=scopes or GCS_SCOPES)
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise NoCredentialsError(
            f"No Google credentials found for Cloud Storage ({exc}). "
            + HOW_TO_AUTHENTICATE
        ) from None


def gcs_options(storage_options: dict[str, Any]) -> dict[str, Any]:
    """gcsfs keyword arguments, with credentials filled in where missing.

    Raises:
        NoCredentialsError: ``gs://`` was asked for and no credentials exist.
    """
    options = dict(storage_options)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator and "endpoint_url" not in options:
        if not emulator.startswith("http"):
            emulator = "http://" + emulator
        options["endpoint_url"] = emulator
    token = options.get("token")
    if is_raw_token(token):
        register_secret(token)  # gcsfs takes it as an OAuth access token
    elif isinstance(token, str) and os.path.isfile(token):
        # A damaged key is named here, not deep inside gcsfs.
        load_key_file(token, None, other_kinds=True)
    if "token" not in options:
        if _authenticated is not None:
            options["token"] = _authenticated
        elif "endpoint_url" in options:
            options["token"] = "anon"  # emulators take no credentials
        else:
            options["token"], _ = _default_credentials()
    return options


_GCSFS_TOKEN_KEYWORDS = ("anon", "google_default", "cloud", "cache", "browser")


def load_key_file(
    path: str, scopes: list[str] | None, *, other_kinds: bool = False
) -> Any:
    """The credentials of a key file: a service account's, or a user's.

    Args:
        other_kinds: a well-formed file of another kind (workload identity
            federation...) is not ours to judge: None, for the caller's
            library to load.

    Raises:
        NoCredentialsError: the file is no usable key; the message names it
            and how to get a good one.
    """
    from google.oauth2 import credentials as user_credentials
    from google.oauth2 import service_account

    try:
        with open(path, encoding="utf-8") as handle:
            info = json.load(handle)
        kind = info.get("type") if isinstance(info, dict) else None
        if kind == "service_account":
            return service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
                info, scopes=scopes
            )
        if kind == "authorized_user":
            return user_credentials.Credentials.from_authorized_user_info(  # type: ignore[no-untyped-call]
                info, scopes
            )
        if other_kinds and isinstance(kind, str):
            return None
        raise ValueError(f"its type is {kind!r}, not a service account's or a user's")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # google-auth's MalformedError is a ValueError; json's errors too.
        raise NoCredentialsError(
            f"{path} is not a usable Google credentials file "
            f"({type(exc).__name__}: {redact(str(exc))[:200]}). Download the "
            f"service account's key again as JSON (Cloud console: IAM & Admin "
            f"> Service accounts > Keys > Add key > JSON), or pass no token to "
            f"use the application-default credentials."
        ) from None


def is_raw_token(token: Any) -> TypeGuard[str]:
    """A string gcsfs reads as a raw OAuth token: neither a keyword nor a file."""
    return (
        isinstance(token, str)
        and token not in _GCSFS_TOKEN_KEYWORDS
        and not os.path.exists(token)
    )


def token_check_failed(token: str, exc: Exception) -> TokenCheckFailedError:
    """The error for gcsfs failing to set up a raw access token, without it.

    gcsfs asks Google's tokeninfo endpoint for a raw token's expiry, the
    token in the query string, so its errors (a failed request names the
    URL) must not travel on: the caller raises this one in their place,
    outside the ``except`` block, so that not even ``__context__`` holds
    them.

    Args:
        token: the raw token given as ``token=``.
        exc: what gcsfs raised.

    Returns:
        The error to raise: what failed, and how to fix it.
    """
    import requests

    # A request's error text is its URL, token included: never shown.
    if isinstance(exc, requests.HTTPError):
        status = getattr(exc.response, "status_code", "an error")
        reason = f"Google's tokeninfo endpoint answered HTTP {status}"
    elif isinstance(exc, requests.RequestException):
        reason = (
            f"Google's tokeninfo endpoint (oauth2.googleapis.com) could not be "
            f"reached ({type(exc).__name__})"
        )
    else:
        reason = " ".join(redact(str(exc)).split())[:300] or type(exc).__name__
    return TokenCheckFailedError(
        f"gcsfs could not set up {describe_principal(token)}: {reason}. gcsfs "
        f"checks a raw token's expiry with Google before any request. Where "
        f"Google cannot be reached (a firewall, an offline storage emulator) "
        f"set the environment variable FETCH_RAW_TOKEN_EXPIRY=false to skip "
        f"that check; for an expired or invalid token get a fresh one "
        f"(`gcloud auth print-access-token`), or pass credentials that renew "
        f"themselves instead: a service-account key file "
        f"(token='/path/to/key.json') or `cr.authenticate()`."
    )


def describe_principal(token: Any) -> str:
    """Who the credentials act as, for permission-denied messages.

    Never the credential itself: a string token is named only when it is
    the path of an existing key file; gcsfs takes any other string as a
    raw access token, which must not reach a message (messages end up in
    the shared run directory).
    """
    if token is None:
        return "application-default credentials"
    if isinstance(token, str):
        if token == "anon":
            return "anonymous (token='anon')"
        if token in _GCSFS_TOKEN_KEYWORDS:
            return f"gcsfs token={token!r}"
        if os.path.exists(token):
            return f"the service-account key file {token}"
        return "a raw access token passed as token= (not shown)"
    email = getattr(token, "service_account_email", None)
    if email and email != "default":
        return str(email)
    account = getattr(token, "account", None)
    if account:
        return str(account)
    return f"{type(token).__name__} credentials (see `gcloud auth list`)"


DRIVE_SCOPES = ["https://www.googleapis.com/auth/drive"]
HOW_TO_AUTHENTICATE_DRIVE = (
    "In Colab run `import colab_resume as cr; cr.authenticate()` (Colab's "
    "sign-in with Drive access). Elsewhere run `gcloud auth "
    "application-default login --scopes=https://www.googleapis.com/auth/drive,"
    "https://www.googleapis.com/auth/cloud-platform`, or pass "
    "storage_options={'token': '/path/to/key.json'} with a service-account key "
    "whose account the Drive folder is shared with (use "
    "'gdrive://id:FOLDER_ID/...')."
)


def drive_credentials(token: Any) -> Any:
    """google-auth credentials with Drive access for a ``gdrive://`` run directory.

    Args:
        token: ``storage_options["token"]``: google-auth credentials, the
            path of a service-account key file, a raw OAuth access token,
            or None for those of :func:`authenticate` or else the
            application-default ones.

    Raises:
        NoCredentialsError: none could be found; the message says how to
            get some.
    """
    if token is not None and not isinstance(token, str):
        return token  # google-auth credentials
    if isinstance(token, str) and os.path.exists(token):
        return load_key_file(token, DRIVE_SCOPES)
    if isinstance(token, str):
        import google.oauth2.credentials

        register_secret(token)
        return google.oauth2.credentials.Credentials(token)  # type: ignore[no-untyped-call]
    if _authenticated is not None and _has_drive_scope(_authenticated):
        return _authenticated
    platform = no_drive_user_auth()
    if platform is not None:
        raise NoCredentialsError(
            f"{platform} offers no Google Drive sign-in (neither drive.mount nor "
            f"Drive access for authenticate_user), so a gdrive:// run_dir needs "
            f"storage_options={{'token': '/path/to/key.json'}}: a service-account "
            f"key whose account the folder is shared with "
            f"('gdrive://id:FOLDER_ID/...'). Or use a Cloud Storage run_dir "
            f"('gs://BUCKET/runs/NAME'), which works there with the platform's "
            f"own credentials."
        )
    import google.auth
    import google.auth.exceptions

    try:
        credentials, _ = google.auth.default(scopes=DRIVE_SCOPES)
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise NoCredentialsError(
            f"No Google credentials found for Google Drive ({exc}). "
            + HOW_TO_AUTHENTICATE_DRIVE
        ) from None
    return credentials


def _has_drive_scope(credentials: Any) -> bool:
    scopes = getattr(credentials, "scopes", None) or ()
    # Colab's user credentials carry no scope list but include Drive.
    return not scopes or any("auth/drive" in scope for scope in scopes)


def no_drive_user_auth() -> str | None:
    """The platform's name where Drive user sign-in is unavailable, else None.

    Kaggle sets ``KAGGLE_KERNEL_RUN_TYPE``; Colab Enterprise (Vertex AI)
    sets ``VERTEX_PRODUCT=COLAB_ENTERPRISE``.
    """
    if os.environ.get("KAGGLE_KERNEL_RUN_TYPE"):
        return "Kaggle"
    if os.environ.get("VERTEX_PRODUCT") == "COLAB_ENTERPRISE":
        return "Colab Enterprise"
    return None

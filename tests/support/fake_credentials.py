"""Google credentials whose tokens a checking proxy rejects after a short life.

The GCS emulator accepts any token, so token expiry is enforced by
:meth:`support.faultproxy.FaultProxy.require_tokens` with :func:`token_check`:
each token carries the time it was issued, and the proxy answers 401
"Invalid Credentials" once it is older than ``lifetime`` seconds.

The client is told each token lasts an hour, as Google's tokens do, so
gcsfs keeps sending it after the server stopped honouring it — a token
revoked early, or a server clock ahead of the client's. Only a refresh
after a real 401 gets the run going again, which is what these
credentials exist to test. They are a real ``google.auth`` credentials
object; only the token server is simulated (none can run here).
"""

from __future__ import annotations

import datetime
import secrets
import threading
import time
from typing import Any

import google.auth.credentials

PREFIX = "ya29.fake-"
CLAIMED_LIFETIME = datetime.timedelta(hours=1)


class ExpiringCredentials(google.auth.credentials.Credentials):
    """Issues a fresh random token on every ``refresh()``; counts refreshes.

    Attributes:
        issued: every token issued so far (for scanning for leaks).
        refreshes: how many times ``refresh`` ran.
    """

    def __init__(self) -> None:
        super().__init__()
        self.issued: list[str] = []
        self.refreshes = 0
        self._lock = threading.Lock()

    def refresh(self, request: Any) -> None:
        with self._lock:
            self.refreshes += 1
            self.token = f"{PREFIX}{secrets.token_hex(12)}-{time.time():.3f}"
            self.issued.append(self.token)
            # google-auth compares expiry with a naive UTC "now".
            now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            self.expiry = now + CLAIMED_LIFETIME

    @property
    def account(self) -> str:
        return "chaos-test@example.invalid"


def token_check(lifetime: float) -> Any:
    """A ``require_tokens`` check: a fake token younger than ``lifetime`` s."""

    def check(authorization: str | None) -> bool:
        if not authorization or not authorization.startswith("Bearer " + PREFIX):
            return False
        try:
            issued = float(authorization.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            return False
        return time.time() - issued <= lifetime

    return check

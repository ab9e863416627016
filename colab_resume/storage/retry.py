"""Retrying on the storage choke point (the policy: :mod:`colab_resume.retry`).

gcsfs already retries a few times inside each request; this outer layer
adds what a training run needs on top: a bounded total time (so a storage
outage becomes a clear error instead of a hang), exponential backoff with
jitter, a token refresh before retrying a 401, and a callback so the
caller can report each retry as an event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from colab_resume.errors import StorageUnavailableError
from colab_resume.redact import redact
from colab_resume.retry import RetriesExhausted, RetryPolicy, retry_call
from colab_resume.storage.faults import brief, is_transient, is_unauthenticated

__all__ = ["RetryHook", "RetryPolicy", "call_with_retry"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Called as on_retry(operation, attempt_number, exception, next_sleep_seconds).
RetryHook = Callable[[str, int, BaseException, float], None]


def call_with_retry(
    func: Callable[[], T],
    *,
    operation: str,
    policy: RetryPolicy,
    refresh_credentials: Callable[[], None] | None = None,
    on_retry: RetryHook | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``func`` and retry it on transient faults within ``policy``.

    Args:
        func: the storage call, without arguments.
        operation: what it does, for messages ("write heartbeat/00000001.json").
        policy: the retry budget.
        refresh_credentials: called before retrying a 401.
        on_retry: told about each retry (for events and logs).
        sleep: injectable for tests.

    Returns:
        What ``func`` returned.

    Raises:
        StorageUnavailableError: transient faults outlasted the budget.
        Exception: a permanent fault, re-raised at once as it came.
    """

    def before_sleep(attempt: int, exc: BaseException, delay: float) -> None:
        # One line per retry: where a hook reports it (the agent's event,
        # itself logged), this log line would say it twice.
        log.log(
            logging.DEBUG if on_retry is not None else logging.WARNING,
            "storage: %s failed (%s); retry %d in %.1fs",
            operation,
            brief(exc),  # short, and without a session URL's capability
            attempt,
            delay,
        )
        if refresh_credentials is not None and is_unauthenticated(exc):
            refresh_credentials()
        if on_retry is not None:
            on_retry(operation, attempt, exc, delay)

    try:
        return retry_call(
            func,
            policy=policy,
            retryable=is_transient,
            before_sleep=before_sleep,
            sleep=sleep,
        )
    except RetriesExhausted as exhausted:
        last = exhausted.last
        raise StorageUnavailableError(
            f"Storage kept failing for {operation} "
            f"({exhausted.attempts} attempts within "
            f"{policy.total_seconds:.0f}s; last error {type(last).__name__}: "
            f"{redact(str(last))}). Check the network and the storage service status; "
            f"the run continues from the last committed state once it is "
            f"reachable again."
        ) from last

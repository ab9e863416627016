"""The retry policy on the storage choke point.

gcsfs already retries a few times inside each request; this outer layer
adds what a training run needs on top: a bounded total time (so a storage
outage becomes a clear error instead of a hang), exponential backoff with
jitter, a token refresh before retrying a 401, and a callback so the
caller can report each retry as an event.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

from colab_resume.errors import StorageUnavailableError
from colab_resume.storage.faults import is_transient, is_unauthenticated
from colab_resume.validate import check_int, check_seconds

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How long and how often to retry a transient storage fault.

    Attributes:
        total_seconds: give up after this much time across all attempts.
        initial_seconds: first backoff.
        max_seconds: cap of a single backoff.
        max_attempts: give up after this many attempts (None: no cap).
    """

    total_seconds: float = 120.0
    initial_seconds: float = 0.5
    max_seconds: float = 10.0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        for name in ("total_seconds", "initial_seconds", "max_seconds"):
            check_seconds(f"RetryPolicy.{name}", getattr(self, name))
        check_int("RetryPolicy.max_attempts", self.max_attempts, optional=True)


class PrivateJitter(tenacity.wait.wait_base):
    """Random extra wait in ``[0, maximum)``, from a generator of its own.

    ``tenacity.wait_random`` draws from Python's global ``random``, which
    ``keras.utils.set_random_seed`` seeds and Keras draws layer seeds from:
    a storage retry before ``build_model()`` then changed the model's
    initial weights (and broke bitwise resume). Jitter must not touch it.
    """

    _rng = random.Random()  # seeded from the OS; never the global generator

    def __init__(self, maximum: float) -> None:
        self.maximum = maximum

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self._rng.uniform(0, self.maximum)


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
    stop: tenacity.stop.stop_base = tenacity.stop_after_delay(policy.total_seconds)
    if policy.max_attempts is not None:
        stop = stop | tenacity.stop_after_attempt(policy.max_attempts)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        assert exc is not None
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "storage: %s failed (%s: %s); retry %d in %.1fs",
            operation,
            type(exc).__name__,
            exc,
            state.attempt_number,
            delay,
        )
        if refresh_credentials is not None and is_unauthenticated(exc):
            refresh_credentials()
        if on_retry is not None:
            on_retry(operation, state.attempt_number, exc, delay)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_transient),
        stop=stop,
        # Spelled with the long-standing API so tenacity 8.x works too.
        wait=tenacity.wait_exponential(
            multiplier=policy.initial_seconds, max=policy.max_seconds
        )
        + PrivateJitter(policy.initial_seconds),
        before_sleep=before_sleep,
        sleep=sleep,
        reraise=False,
    )
    try:
        return retrying(func)
    except tenacity.RetryError as exhausted:
        last = exhausted.last_attempt.exception()
        raise StorageUnavailableError(
            f"Storage kept failing for {operation} "
            f"({exhausted.last_attempt.attempt_number} attempts within "
            f"{policy.total_seconds:.0f}s; last error {type(last).__name__}: "
            f"{last}). Check the network and the storage service status; "
            f"the run continues from the last committed state once it is "
            f"reachable again."
        ) from last

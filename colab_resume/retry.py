"""One home for retrying: the policy, the jitter and the loop.

Three things in the package wait and try again, each for its own reason: a
storage call on a transient fault (:mod:`colab_resume.storage.retry`), the
TPU connect sequence while the TPU starts (:mod:`colab_resume.backend.tf_tpu`)
and the in-session recovery after an accelerator loss
(:mod:`colab_resume.agent.loop`). They differ in what counts as retryable
and in what they say while waiting; the budget (a total deadline, capped
exponential backoff, jitter from a private generator, an attempt cap) is
one :class:`RetryPolicy`, and the loop is one :func:`retry_call` with an
injectable sleep and clock, as tenacity's own ``nap.sleep``.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

from colab_resume import defaults
from colab_resume.validate import check_int, check_seconds

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How long and how often to try again.

    Attributes:
        total_seconds: give up after this much time across all attempts
            (the last attempt starts at most this long after the first).
        initial_seconds: first backoff; it doubles after every attempt.
        max_seconds: cap of a single backoff.
        max_attempts: give up after this many attempts (None: no cap).
    """

    total_seconds: float = defaults.STORAGE_RETRY_SECONDS
    initial_seconds: float = 0.5
    max_seconds: float = 10.0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        for name in ("total_seconds", "initial_seconds", "max_seconds"):
            check_seconds(f"RetryPolicy.{name}", getattr(self, name))
        check_int("RetryPolicy.max_attempts", self.max_attempts, optional=True)

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (1-based), jitter included."""
        exponential = min(self.max_seconds, self.initial_seconds * 2 ** (attempt - 1))
        return float(exponential + _JITTER.uniform(0, self.initial_seconds))


# A generator of its own, seeded from the OS: ``random``'s global one is
# what ``keras.utils.set_random_seed`` seeds and Keras draws layer seeds
# from, so a storage retry before ``build_model()`` drawing from it changed
# the model's initial weights (and broke bitwise resume).
_JITTER = random.Random()


def jitter(low: float, high: float) -> float:
    """A random wait in [low, high] from the package's own generator."""
    return _JITTER.uniform(low, high)


class RetriesExhausted(Exception):
    """Retryable failures outlasted the policy.

    Attributes:
        attempts: how many attempts were made.
        elapsed: seconds from the first attempt to giving up (by the clock).
        last: the last attempt's exception (also ``__cause__``).
    """

    def __init__(self, attempts: int, elapsed: float, last: BaseException) -> None:
        super().__init__(f"{attempts} attempts in {elapsed:.1f}s; last: {last!r}")
        self.attempts, self.elapsed, self.last = attempts, elapsed, last


# Told before each wait: before_sleep(failed_attempt_number, exception, delay).
BeforeSleep = Callable[[int, BaseException, float], None]


def retry_call(
    func: Callable[[], T],
    *,
    policy: RetryPolicy,
    retryable: Callable[[BaseException], bool],
    before_sleep: BeforeSleep | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Call ``func`` until it succeeds, retrying what ``retryable`` accepts.

    A wait never runs past the deadline: the last attempt happens at it.

    Returns:
        What ``func`` returned.

    Raises:
        RetriesExhausted: retryable failures outlasted ``policy``; the last
            one is its ``__cause__``.
        Exception: a failure ``retryable`` refuses, at once, as raised.
    """
    start = clock()

    def should_stop(state: tenacity.RetryCallState) -> bool:
        if (
            policy.max_attempts is not None
            and state.attempt_number >= policy.max_attempts
        ):
            return True
        return clock() - start >= policy.total_seconds

    def wait(state: tenacity.RetryCallState) -> float:
        remaining = policy.total_seconds - (clock() - start)
        return max(0.0, min(policy.backoff(state.attempt_number), remaining))

    def tell(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        assert exc is not None
        delay = state.next_action.sleep if state.next_action else 0.0
        if before_sleep is not None:
            before_sleep(state.attempt_number, exc, delay)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(retryable),
        stop=should_stop,
        wait=wait,
        before_sleep=tell,
        sleep=sleep,
        reraise=False,
    )
    try:
        return retrying(func)
    except tenacity.RetryError as exhausted:
        last = exhausted.last_attempt.exception()
        assert last is not None
        raise RetriesExhausted(
            exhausted.last_attempt.attempt_number, clock() - start, last
        ) from last

"""Waiting made explicit: poll a condition instead of sleeping and hoping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    unless: Callable[[], str | None] | None = None,
) -> T:
    """Poll ``condition()`` until it returns something truthy, and return that.

    Args:
        condition: called every ``interval`` seconds.
        timeout: seconds before the test fails.
        what: what is awaited, for the failure message ("a committed
            checkpoint").
        interval: seconds between polls.
        unless: called between polls; a non-empty string it returns fails
            the test at once with that reason (e.g. "the worker exited").

    Raises:
        AssertionError: ``condition`` stayed falsy for ``timeout`` seconds,
            or ``unless`` gave a reason to stop.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if unless is not None and (reason := unless()):
            raise AssertionError(f"gave up waiting for {what}: {reason}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)

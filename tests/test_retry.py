"""The one retry home (colab_resume/retry.py): budget, backoff, jitter, clock."""

from __future__ import annotations

import random

import pytest

from colab_resume.retry import RetriesExhausted, RetryPolicy, retry_call


class FakeTime:
    """A clock that moves only when slept on: waits are what the loop asks."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(times: int, exc: BaseException):
    calls = {"n": 0}

    def func() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise exc
        return "ok"

    return func, calls


def test_backoff_doubles_from_initial_and_is_capped_with_jitter_below_initial():
    policy = RetryPolicy(initial_seconds=1.0, max_seconds=5.0)
    for attempt, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)]:
        delay = policy.backoff(attempt)
        assert base <= delay < base + 1.0, (attempt, delay)


def test_jitter_never_draws_from_the_global_random_generator():
    """Keras seeds ``random``'s global generator: drawing from it changed the
    model's initial weights whenever a retry came before build_model()."""
    random.seed(1234)
    expected = random.random()
    random.seed(1234)
    for attempt in range(1, 20):
        RetryPolicy().backoff(attempt)
    assert random.random() == expected


def test_retry_call_retries_what_is_retryable_then_returns():
    time = FakeTime()
    func, calls = failing(3, ConnectionError("reset"))
    before: list[int] = []
    result = retry_call(
        func,
        policy=RetryPolicy(total_seconds=100, initial_seconds=1, max_seconds=2),
        retryable=lambda exc: isinstance(exc, ConnectionError),
        before_sleep=lambda attempt, exc, delay: before.append(attempt),
        sleep=time.sleep,
        clock=time.clock,
    )
    assert result == "ok" and calls["n"] == 4 and before == [1, 2, 3]


def test_a_failure_that_is_not_retryable_is_raised_at_once():
    time = FakeTime()
    func, calls = failing(5, ValueError("permanent"))
    with pytest.raises(ValueError):
        retry_call(
            func,
            policy=RetryPolicy(),
            retryable=lambda exc: isinstance(exc, ConnectionError),
            sleep=time.sleep,
            clock=time.clock,
        )
    assert calls["n"] == 1 and time.sleeps == []


def test_the_deadline_ends_the_retries_and_no_wait_runs_past_it():
    time = FakeTime()
    func, calls = failing(10**6, ConnectionError("down"))
    policy = RetryPolicy(total_seconds=10, initial_seconds=1, max_seconds=4)
    with pytest.raises(RetriesExhausted) as exhausted:
        retry_call(
            func,
            policy=policy,
            retryable=lambda e: True,
            sleep=time.sleep,
            clock=time.clock,
        )
    assert time.now == pytest.approx(10.0)  # the last attempt at the deadline
    assert exhausted.value.attempts == calls["n"]
    assert isinstance(exhausted.value.__cause__, ConnectionError)


def test_max_attempts_ends_the_retries():
    time = FakeTime()
    func, calls = failing(10, ConnectionError("down"))
    with pytest.raises(RetriesExhausted):
        retry_call(
            func,
            policy=RetryPolicy(max_attempts=3),
            retryable=lambda e: True,
            sleep=time.sleep,
            clock=time.clock,
        )
    assert calls["n"] == 3 and len(time.sleeps) == 2


@pytest.mark.parametrize("field", ["total_seconds", "initial_seconds", "max_seconds"])
def test_a_bad_policy_names_its_field(field):
    with pytest.raises(ValueError, match=f"RetryPolicy.{field}"):
        RetryPolicy(**{field: -1})


def test_with_no_network_each_retry_is_one_short_line(caplog):
    """A real refused connection (nothing listens on the port): the agent's
    hook reports each retry once, short; the storage layer adds no second
    line of its own."""
    import logging

    from colab_resume.errors import StorageUnavailableError
    from colab_resume.storage import Storage
    from colab_resume.storage.faults import brief

    told: list[str] = []

    def hook(operation, attempt, exc, delay):
        told.append(f"{operation}: {brief(exc)}; retry {attempt} in {delay:.1f}s")

    storage = Storage(
        "gs://bucket/runs/r",
        {"token": "anon", "endpoint_url": "http://127.0.0.1:9"},
        retry=RetryPolicy(total_seconds=1.0, initial_seconds=0.05, max_seconds=0.1),
        on_retry=hook,
    )
    with caplog.at_level(logging.DEBUG, logger="colab_resume.storage"):
        with pytest.raises(StorageUnavailableError):
            storage.exists("run.json")
    assert told and all(len(line) < 200 for line in told), told
    assert all("connect" in line.lower() for line in told), told
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in warned if "retry" in r.getMessage()]


def test_a_transport_errors_brief_is_its_cause():
    """requests' text for a refused connection is hundreds of characters."""
    from colab_resume.storage.faults import brief

    text = (
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with "
        "url: /drive/v3/files?q=%27abc%27+in+parents&fields=nextPageToken%2C"
        "files%28id%29&pageSize=1000 (Caused by NewConnectionError('<urllib3."
        "connection.HTTPConnection object at 0x7f>: Failed to establish a new "
        "connection: [Errno 111] Connection refused'))"
    )
    assert brief(ConnectionError(text)) == (
        "ConnectionError: [Errno 111] Connection refused"
    )
    assert len(brief(OSError("x" * 1000))) < 200

"""Connect to a TPU: resolver, cluster, system init, strategy; with retries.

The order is TensorFlow's own recipe::

    resolver = TPUClusterResolver(tpu=target)   # "local", a name, grpc://ip:8470
    experimental_connect_to_cluster(resolver)   # only if the TPU is remote
    initialize_tpu_system(resolver)
    strategy = TPUStrategy(resolver)

A TPU that is still starting, or whose worker was just restarted, answers
with ``UnavailableError``/``DeadlineExceededError`` for a while, so every
attempt redoes the whole sequence with a fresh resolver, under exponential
backoff with jitter and a total deadline; each attempt and each failure is
reported as an event. Failures with a known cause (missing TPU build, TPU
held by another process, missing TPU name) are not retried: they become our
errors at once.

Every TensorFlow call goes through a :class:`TPUApi` so tests can drive
this path with a fake: there is no TPU where the tests run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from colab_resume.events import EventLog
from colab_resume.retry import RetriesExhausted, RetryPolicy, retry_call
from colab_resume.runtime.errors import AcceleratorUnavailableError
from colab_resume.runtime.loss import is_retryable_connect_error
from colab_resume.runtime.options import ConnectOptions

log = logging.getLogger(__name__)


class TPUApi(Protocol):
    """The TensorFlow calls used to reach a TPU."""

    def cluster_resolver(self, tpu: str) -> Any: ...

    def connect_to_cluster(self, resolver: Any) -> None: ...

    def initialize_tpu_system(self, resolver: Any) -> Any: ...

    def shutdown_tpu_system(self, resolver: Any) -> None: ...

    def tpu_strategy(self, resolver: Any) -> Any: ...


class TensorFlowTPUApi:
    """:class:`TPUApi` backed by TensorFlow, imported on first use.

    Args:
        load_tensorflow: returns the ``tensorflow`` module (or raises our
            "TensorFlow not installed" error).
    """

    def __init__(self, load_tensorflow: Callable[[], Any]):
        self._load = load_tensorflow

    def cluster_resolver(self, tpu: str) -> Any:
        return self._load().distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)

    def connect_to_cluster(self, resolver: Any) -> None:
        self._load().config.experimental_connect_to_cluster(resolver)

    def initialize_tpu_system(self, resolver: Any) -> Any:
        return self._load().tpu.experimental.initialize_tpu_system(resolver)

    def shutdown_tpu_system(self, resolver: Any) -> None:
        shutdown = getattr(self._load().tpu.experimental, "shutdown_tpu_system", None)
        if shutdown is not None:  # absent in some old TensorFlow versions
            shutdown(resolver)

    def tpu_strategy(self, resolver: Any) -> Any:
        return self._load().distribute.TPUStrategy(resolver)


def _emit(events: EventLog | None, kind: str, message: str, **kw: Any) -> None:
    if events is not None:
        events.emit(kind, message, **kw)
    else:
        level = kw.pop("level", "info")
        log.log(logging.WARNING if level != "info" else logging.INFO, message)


def connect_tpu(
    target: str,
    *,
    remote: bool,
    api: TPUApi,
    options: ConnectOptions,
    diagnose: Callable[[BaseException], BaseException | None],
    events: EventLog | None = None,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> tuple[Any, Any]:
    """Resolve, (connect,) initialize and build a ``TPUStrategy``, with retries.

    Args:
        target: the resolver's ``tpu`` argument.
        remote: call ``experimental_connect_to_cluster`` first (legacy TPU
            node, named Cloud TPU); never for ``"local"``.
        api: the TensorFlow calls.
        options: the retry budget (deadline, backoff, attempts).
        diagnose: maps a failure to our explanatory error, or None.
        events: told about each attempt and each retry.
        sleep: waits between attempts; injectable for tests.
        clock: monotonic seconds; the deadline is measured with it.

    Returns:
        ``(strategy, resolver)``.

    Raises:
        AcceleratorUnavailableError: retryable failures outlasted the deadline.
        AcceleratorError: a diagnosed failure (see :mod:`.diagnose`).
        Exception: an unknown, non-retryable failure, as TensorFlow raised it.
    """
    attempts = 0

    def attempt() -> tuple[Any, Any]:
        nonlocal attempts
        attempts += 1
        number = attempts
        _emit(
            events,
            "runtime.tpu.attempt",
            f"connecting to TPU {target!r} (attempt {number})",
            target=target,
            attempt=number,
        )
        resolver = api.cluster_resolver(target)
        if remote:
            api.connect_to_cluster(resolver)
        api.initialize_tpu_system(resolver)
        return api.tpu_strategy(resolver), resolver

    def retryable(exc: BaseException) -> bool:
        return diagnose(exc) is None and is_retryable_connect_error(exc)

    def before_sleep(number: int, exc: BaseException, delay: float) -> None:
        _emit(
            events,
            "runtime.tpu.retry",
            f"TPU {target!r} not reachable (attempt {number}: "
            f"{type(exc).__name__}: {exc}); retrying in {delay:.1f}s",
            level="warning",
            target=target,
            attempt=number,
            error=f"{type(exc).__name__}: {exc}",
            delay_s=delay,
        )

    policy = RetryPolicy(
        total_seconds=options.deadline_seconds,
        initial_seconds=options.initial_backoff_seconds,
        max_seconds=options.max_backoff_seconds,
        max_attempts=options.max_attempts,
    )
    try:
        return retry_call(
            attempt,
            policy=policy,
            retryable=retryable,
            before_sleep=before_sleep,
            sleep=sleep,
            clock=clock,
        )
    except RetriesExhausted as exhausted:
        last = exhausted.last
        raise AcceleratorUnavailableError(
            f"Could not connect to TPU {target!r}: "
            f"{exhausted.attempts} attempts in "
            f"{exhausted.elapsed:.0f}s (deadline {policy.total_seconds:.0f}s) all "
            f"failed; last error {type(last).__name__}: {last}. The TPU may still "
            f"be starting or was preempted: wait and run again, raise "
            f"deadline_seconds, or choose another runtime."
        ) from last
    except Exception as exc:
        explained = diagnose(exc)
        if explained is not None:
            raise explained from exc
        raise


def shutdown_tpu(api: TPUApi, resolver: Any, events: EventLog | None = None) -> None:
    """Shut the TPU system down before re-initialising it; failures are expected.

    After a loss the worker may be gone, so a failed shutdown is reported
    and otherwise ignored: initialising again is what matters.
    """
    try:
        api.shutdown_tpu_system(resolver)
    except Exception as exc:  # the system being shut down may be dead
        _emit(
            events,
            "runtime.tpu.shutdown_failed",
            f"TPU shutdown before re-initialising failed ({type(exc).__name__}: "
            f"{exc}); initialising anyway",
            level="warning",
        )

"""What happened to a run, for the panel, the CLI and the logs.

Every part of the agent reports through one :class:`EventLog`: lease taken,
storage retries, heartbeat failures, reconnects, checkpoint commits. The
log keeps the recent events in memory, writes each to ``logging``, and
tells subscribers (the panel) synchronously — subscribers must be cheap.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from colab_resume.redact import redact

log = logging.getLogger(__name__)

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


@dataclasses.dataclass(frozen=True)
class Event:
    """One thing that happened.

    Attributes:
        time: wall-clock seconds since the epoch, by this machine's clock.
        kind: dotted category, e.g. ``"lease.taken"``, ``"storage.retry"``.
        message: one line for humans.
        level: ``"info"``, ``"warning"`` or ``"error"``.
        step: the training step when it happened, if known.
        data: small JSON-able details.
    """

    time: float
    kind: str
    message: str
    level: str = "info"
    step: int | None = None
    data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


Subscriber = Callable[[Event], None]


class EventLog:
    """Thread-safe, bounded record of events with synchronous subscribers.

    Args:
        maxlen: how many recent events to keep in memory.
        clock: wall clock, injectable for tests.
    """

    def __init__(self, maxlen: int = 500, clock: Callable[[], float] = time.time):
        self._events: collections.deque[Event] = collections.deque(maxlen=maxlen)
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self._clock = clock

    def emit(
        self,
        kind: str,
        message: str,
        *,
        level: str = "info",
        step: int | None = None,
        **data: Any,
    ) -> Event:
        """Record an event, log it, and tell the subscribers."""
        if level not in _LEVELS:
            raise ValueError(f"level must be one of {sorted(_LEVELS)}, got {level!r}")
        # Events reach the run directory (history), logs and panels.
        data = {k: redact(v) if isinstance(v, str) else v for k, v in data.items()}
        event = Event(self._clock(), kind, redact(message), level, step, data)
        with self._lock:
            self._events.append(event)
            subscribers = list(self._subscribers)
        prefix = f"[step {step}] " if step is not None else ""
        log.log(_LEVELS[level], "%s%s: %s", prefix, kind, message)
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception:  # a broken display must not break training
                log.exception("event subscriber %r failed", subscriber)
        return event

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber(event)`` for every new event; returns an unsubscribe."""
        with self._lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return unsubscribe

    def recent(self, n: int | None = None, kind: str | None = None) -> list[Event]:
        """The most recent events, oldest first; optionally only one kind prefix."""
        with self._lock:
            events = list(self._events)
        if kind is not None:
            events = [
                e for e in events if e.kind == kind or e.kind.startswith(kind + ".")
            ]
        return events if n is None else events[-n:]

"""Progress events for transfers long enough for a person to wonder."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from colab_resume.events import EventLog


class TransferProgress:
    """Emits ``<kind>`` events with bytes, rate and ETA while a transfer runs.

    Silent for transfers shorter than ``quiet_seconds``; after that, at most
    one event per ``every_seconds``. Thread-safe: parallel workers report
    into the same instance.

    Args:
        events: where the events go.
        kind: event kind, e.g. ``"checkpoint.upload.progress"``.
        what: a few words for the message ("upload of step-000001200.e00000001").
        total_bytes: expected bytes.
        step: training step, for the event.
        quiet_seconds: no events before this much time has passed.
        every_seconds: minimum time between events.
        clock: monotonic clock, injectable for tests.
    """

    def __init__(
        self,
        events: EventLog,
        *,
        kind: str,
        what: str,
        total_bytes: int,
        step: int | None,
        quiet_seconds: float = 2.0,
        every_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._events = events
        self._kind = kind
        self._what = what
        self.total_bytes = total_bytes
        self._step = step
        self._quiet = quiet_seconds
        self._every = every_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self.started = clock()
        self._last_event = self.started
        self.done_bytes = 0

    def advance(self, nbytes: int) -> None:
        """Count ``nbytes`` more as transferred; maybe emit an event."""
        with self._lock:
            self.done_bytes += nbytes
            now = self._clock()
            if now - self.started < self._quiet or now - self._last_event < self._every:
                return
            self._last_event = now
            done, elapsed = self.done_bytes, now - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        left = max(self.total_bytes - done, 0)
        eta = left / rate if rate > 0 else None
        eta_text = f", ETA {eta:.0f}s" if eta is not None else ""
        self._events.emit(
            self._kind,
            f"{self._what}: {done / 1e6:.1f}/{self.total_bytes / 1e6:.1f} MB at "
            f"{rate / 1e6:.1f} MB/s{eta_text}",
            step=self._step,
            bytes_done=done,
            bytes_total=self.total_bytes,
            rate_bytes_per_s=rate,
            eta_s=eta,
        )

    @property
    def elapsed(self) -> float:
        return self._clock() - self.started

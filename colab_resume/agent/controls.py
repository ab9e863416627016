"""Requests from outside the training loop: save now, pause, resume, stop.

Buttons and other threads only set flags here; the training loop reads them
between steps, so nothing ever touches the model from another thread.
"""

from __future__ import annotations

import threading


class Controls:
    """Thread-safe flags the training loop polls at every step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._save = False
        self._stop = False
        self._preempted: str | None = None  # why, when the host is going away
        self._resume = threading.Event()
        self._resume.set()

    def request_save(self) -> None:
        with self._lock:
            self._save = True

    def take_save_request(self) -> bool:
        """True once per request (then cleared)."""
        with self._lock:
            requested, self._save = self._save, False
            return requested

    def pause(self) -> None:
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    def wait_while_paused(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds while paused; True once resumed."""
        return self._resume.wait(timeout)

    def stop(self) -> None:
        with self._lock:
            self._stop = True
        self._resume.set()  # a paused loop must wake up to stop

    def preempt(self, reason: str) -> None:
        """Stop because the host is going away (SIGTERM, a preemption notice).

        The same stop as :meth:`stop`; the reason makes the run end
        PREEMPTED rather than STOPPED, so a launcher restarts it.
        """
        with self._lock:
            if self._preempted is None:
                self._preempted = reason
        self.stop()

    @property
    def preempted(self) -> str | None:
        """Why the host is going away (None: it is not, as far as we know)."""
        with self._lock:
            return self._preempted

    @property
    def stop_requested(self) -> bool:
        with self._lock:
            return self._stop

    def reset(self) -> None:
        with self._lock:
            self._save = False
            self._stop = False
            self._preempted = None
        self._resume.set()

"""The lease holder's heartbeat: a background thread that never blocks training.

Every ``interval`` seconds the writer checks whether a newer lease exists
(then it is *fenced*: it stops and writes nothing more) and overwrites
``heartbeat/<lease>.json`` with what the training loop last reported.
Storage faults cost retries within one interval; when beats keep failing
the writer says so through events and :attr:`HeartbeatWriter.last_error`,
and keeps trying — it never dies silently and never kills training.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from colab_resume.events import EventLog
from colab_resume.heartbeat import lease as leases
from colab_resume.parsing import text
from colab_resume.protocol import rundir
from colab_resume.protocol.records import (
    HOLDER_STATES,
    BeatRecord,
    LeaseRecord,
    to_json,
)
from colab_resume.redact import redact
from colab_resume.storage import RetryPolicy, Storage

log = logging.getLogger(__name__)

# Consecutive failed beats before the failure is reported as an error.
FAILURES_BEFORE_ERROR = 3


class HeartbeatWriter:
    """Writes the holder's beats on a daemon thread.

    Args:
        storage: the run directory.
        lease: the lease this session holds.
        events: where failures, recoveries and fencing are reported.
        clock: wall clock (recorded in beats for humans).
        monotonic: monotonic clock (measures time since step progress).
    """

    def __init__(
        self,
        storage: Storage,
        lease: LeaseRecord,
        events: EventLog,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = lease.heartbeat_seconds
        # One beat's retries must not outlast the interval to the next one.
        self._storage = storage.with_retry(
            RetryPolicy(
                total_seconds=max(self.interval, 2.0),
                initial_seconds=min(0.5, self.interval / 4),
                max_seconds=max(self.interval / 2, 0.5),
            )
        )
        self._lease = lease
        self._events = events
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beats = 0
        self._fields: dict[str, Any] = {
            "state": "starting",
            "step": None,
            "accelerator": None,
            "checkpoint_step": None,
            "error": None,
        }
        self._progress_at: float | None = None
        self._progress_mono = monotonic()
        self.failures = 0  # consecutive failed beats
        self.last_error: BaseException | None = None
        self.fenced_by: int | None = None
        self.fenced_why = ""  # what made the lease LOST, in words

    # --- what the training loop tells us --------------------------------------

    def update(self, **fields: Any) -> None:
        """Record new values for the next beat (cheap; training thread).

        Accepts ``state``, ``step``, ``accelerator``, ``checkpoint_step``,
        ``error``. A change of ``step`` counts as progress.
        """
        unknown = set(fields) - set(self._fields)
        if unknown:
            raise TypeError(f"unknown heartbeat fields: {sorted(unknown)}")
        state = fields.get("state")
        if state is not None and state not in HOLDER_STATES:
            raise ValueError(f"state must be one of {HOLDER_STATES}, got {state!r}")
        if isinstance(fields.get("error"), str):  # the beat is shared storage
            fields["error"] = text(redact(fields["error"]))
        with self._lock:
            if "step" in fields and fields["step"] != self._fields["step"]:
                self._progress_at = self._clock()
                self._progress_mono = self._monotonic()
            self._fields.update(fields)

    @property
    def beats(self) -> int:
        """Beats attempted so far (the counter the next record carries)."""
        return self._beats

    @property
    def state(self) -> str:
        """The holder state the next beat will report."""
        with self._lock:
            return str(self._fields["state"])

    @property
    def fenced(self) -> bool:
        return self.fenced_by is not None

    @property
    def healthy(self) -> bool:
        """False while beats are failing."""
        return self.failures == 0

    # --- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """Write the first beat now (errors propagate), then beat in the background."""
        self._beat()
        self._thread = threading.Thread(
            target=self._run,
            name=f"colab-resume-heartbeat-{self._lease.lease}",
            daemon=True,
        )
        self._thread.start()

    def stop(self, final_state: str | None = None, error: str | None = None) -> None:
        """Stop the thread; write one last beat with ``final_state`` unless fenced."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 30)
        if final_state is not None and not self.fenced:
            self.update(state=final_state, error=error)
            try:
                self._beat()
            except Exception as exc:
                self._events.emit(
                    "heartbeat.failed",
                    f"could not write the final heartbeat ({final_state}): {exc}",
                    level="warning",
                )

    def _run(self) -> None:
        # Fixed rate: a slow beat (retries) does not push the next one back.
        next_beat = self._monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_beat - self._monotonic())):
            next_beat = max(next_beat + self.interval, self._monotonic())
            if self.fenced:
                return
            try:
                self._beat()
            except Exception as exc:
                self._record_failure(exc)
            else:
                self._record_success()

    # --- one beat --------------------------------------------------------------

    def verify_lease(self, storage: Storage | None = None) -> bool:
        """Check storage that this session still owns the run; fence it if not.

        A deleted own lease is put back (see
        :func:`~colab_resume.heartbeat.lease.verify_lease`) and reported.

        Args:
            storage: the storage to check through (default: the beat's own,
                whose retry budget is one interval).

        Returns:
            True while this session owns the run.
        """
        verdict = leases.verify_lease(storage or self._storage, self._lease)
        if verdict.state == leases.RESTORED:
            self._events.emit(
                "lease.restored",
                f"lease {self._lease.lease} had been deleted from storage; "
                f"this session recreated it (create-only) and keeps the run",
                level="warning",
                lease=self._lease.lease,
            )
        elif verdict.state in (leases.SUPERSEDED, leases.LOST):
            self._fence(verdict)
            return False
        return True

    def _beat(self) -> None:
        lease = self._lease.lease
        if not self.verify_lease():
            return
        with self._lock:
            self._beats += 1
            fields = dict(self._fields)
            since_progress = self._monotonic() - self._progress_mono
            record = BeatRecord(
                session_id=self._lease.session_id,
                host=self._lease.host,
                lease=lease,
                beat=self._beats,
                progress_at=self._progress_at,
                since_progress_s=round(since_progress, 3),
                written_at=self._clock(),
                **fields,
            )
        self._storage.write_json(rundir.heartbeat_path(lease), to_json(record))

    def _fence(self, verdict: leases.Verdict) -> None:
        if self.fenced:
            return
        # LOST: lease N itself now names another session (or is unreadable).
        self.fenced_by = verdict.by if verdict.by is not None else self._lease.lease
        self.fenced_why = verdict.why
        self._stop.set()
        why = (
            f"a newer session took lease {verdict.by}"
            if verdict.by is not None
            else f"this session can no longer prove it owns the run: {verdict.why}"
        )
        self._events.emit(
            "lease.fenced",
            f"{why}; this session (lease {self._lease.lease}) stops writing",
            level="error",
            lease=self._lease.lease,
            fenced_by=self.fenced_by,
        )

    def _record_failure(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = exc
        silent_for = self.failures * self.interval
        level = "error" if self.failures >= FAILURES_BEFORE_ERROR else "warning"
        self._events.emit(
            "heartbeat.failed",
            f"heartbeat {self.failures} in a row failed ({type(exc).__name__}: "
            f"{exc}); silent for ~{silent_for:.0f}s, others judge this run dead "
            f"after {self._lease.dead_after_seconds:.0f}s. Training continues.",
            level=level,
            failures=self.failures,
        )

    def _record_success(self) -> None:
        if self.failures:
            self._events.emit(
                "heartbeat.recovered",
                f"heartbeat written again after {self.failures} failed beats",
            )
        self.failures = 0
        self.last_error = None

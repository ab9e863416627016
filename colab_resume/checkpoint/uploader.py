"""One background thread that runs checkpoint uploads, one at a time.

The training thread hands over a job and goes on training. If the job
fails, the exception is kept and raised on the training thread at its next
call (:meth:`Uploader.check`, or the next submit) — background work never
fails silently. Orbax's finalize thread follows the same pattern.

The thread outlives its jobs: starting a thread per save made the training
thread wait in ``Thread.start()`` until the new thread ran, and the new
thread, busy at once, kept the GIL for a switch interval or more — 5 to
15 ms of every save. A handover to a waiting thread costs a lock. The
thread also runs at a lower scheduling priority (Linux ``nice``, inherited
by the transfer threads it starts), so on a machine with few cores the
training thread and TensorFlow's own threads come first.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# A thread idle this long ends; the next submit starts another.
IDLE_SECONDS = 300.0
# Added to the upload thread's nice value (Linux: per thread).
NICE_INCREMENT = 10


class Uploader:
    """Runs submitted jobs on one daemon thread, one in flight at most.

    Args:
        on_error: told about a failed job (on the uploader thread) before the
            error is stored for the training thread.
    """

    def __init__(self, on_error: Callable[[str, BaseException], None]) -> None:
        self._on_error = on_error
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._job: tuple[str, Callable[[], None]] | None = None
        self._running = False  # a job is queued or running
        self._closed = False
        self._error: BaseException | None = None
        self._error_job = ""
        self.current: str | None = None

    @property
    def busy(self) -> bool:
        return self._running

    def submit(self, name: str, job: Callable[[], None]) -> None:
        """Start ``job`` in the background. The previous one must be finished.

        Raises:
            RuntimeError: a job is still running (call :meth:`wait` first).
            BaseException: the stored error of an earlier job.
        """
        self.check()
        with self._cond:
            if self._running:
                raise RuntimeError(f"upload {self.current} still running; wait() first")
            self._closed = False
            self._job = (name, job)
            self._running = True
            self.current = name
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="colab-resume-upload", daemon=True
                )
                self._thread.start()
            else:
                self._cond.notify_all()

    def _serve(self) -> None:
        _lower_priority()
        while True:
            with self._cond:
                while self._job is None and not self._closed:
                    if not self._cond.wait(IDLE_SECONDS) and self._job is None:
                        break  # idle: end; a later submit starts a new thread
                if self._job is None:
                    self._thread = None
                    return
                name, job = self._job
                self._job = None
            self._run(name, job)

    def _run(self, name: str, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:
            with self._cond:
                self._error, self._error_job = exc, name
            try:
                self._on_error(name, exc)
            except Exception:  # reporting must not hide the real error
                log.exception("checkpoint: reporting the failure of %s failed", name)
        finally:
            with self._cond:
                self.current = None
                self._running = False
                self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the running job ends; True if none is running now."""
        with self._cond:
            self._cond.wait_for(lambda: not self._running, timeout)
            return not self._running

    def close(self) -> None:
        """Let the thread end once the job in flight (if any) is done."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def check(self) -> None:
        """Raise the error of a failed job once, on the calling thread."""
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            raise error


def _lower_priority() -> None:
    """Make the calling thread (and threads it starts) yield the CPU first."""
    if not sys.platform.startswith("linux"):
        return  # elsewhere the call would renice the whole process
    try:
        os.setpriority(
            os.PRIO_PROCESS,
            threading.get_native_id(),
            os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + NICE_INCREMENT,
        )
    except OSError:  # not allowed (a sandbox): no matter
        log.debug("checkpoint: could not lower the upload thread's priority")

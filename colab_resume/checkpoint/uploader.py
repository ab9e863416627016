"""One background thread that runs checkpoint uploads, one at a time.

The training thread hands over a job and goes on training. If the job
fails, the exception is kept and raised on the training thread at its next
call (:meth:`Uploader.check`, or the next submit) — background work never
fails silently. Orbax's finalize thread follows the same pattern.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Uploader:
    """Runs submitted jobs on a single daemon thread, one in flight at most.

    Args:
        on_error: told about a failed job (on the uploader thread) before the
            error is stored for the training thread.
    """

    def __init__(self, on_error: Callable[[str, BaseException], None]) -> None:
        self._on_error = on_error
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._error_job = ""
        self.current: str | None = None

    @property
    def busy(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def submit(self, name: str, job: Callable[[], None]) -> None:
        """Start ``job`` in the background. The previous one must be finished.

        Raises:
            RuntimeError: a job is still running (call :meth:`wait` first).
            BaseException: the stored error of an earlier job.
        """
        self.check()
        if self.busy:
            raise RuntimeError(f"upload {self.current} still running; wait() first")

        def run() -> None:
            try:
                job()
            except BaseException as exc:
                with self._lock:
                    self._error, self._error_job = exc, name
                try:
                    self._on_error(name, exc)
                except Exception:  # reporting must not hide the real error
                    log.exception(
                        "checkpoint: reporting the failure of %s failed", name
                    )
            finally:
                with self._lock:
                    self.current = None

        with self._lock:
            self.current = name
        self._thread = threading.Thread(
            target=run, name=f"colab-resume-upload-{name}", daemon=True
        )
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the running job ends; True if none is running now."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.busy

    def check(self) -> None:
        """Raise the error of a failed job once, on the calling thread."""
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

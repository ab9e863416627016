"""Preemption notices from the Compute Engine metadata server.

A spot (preemptible) VM gets about 30 s between the shutdown notice and
power-off; its metadata server then says ``instance/preempted`` is
``TRUE``. Host maintenance is announced in ``instance/maintenance-event``
(``TERMINATE_ON_HOST_MAINTENANCE`` for VMs that cannot live-migrate: those
with GPUs, and TPU VMs). Both are long-polled (``?wait_for_change=true``),
so a notice arrives as soon as the server has it, often before the
SIGTERM the guest agent sends.

On a notice the watcher does what SIGTERM does: the training loop commits a
checkpoint at the next step and the run ends PREEMPTED. A live migration
(``MIGRATE_ON_HOST_MAINTENANCE``) only asks for a checkpoint: the process
survives it, but it is a good moment to have one.

When to watch: only on Compute Engine (or where ``GCE_METADATA_HOST``
names a metadata server, as google-auth reads it), decided from the
environment and the DMI product name, never from a network probe (which
could hang start-up on a laptop). Colab and Kaggle run on Compute Engine
too, but their runtimes are not spot VMs of the user's: skipped there
unless asked for (``preemption_notices=True``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from colab_resume.events import EventLog

log = logging.getLogger(__name__)

HOST_ENV = "GCE_METADATA_HOST"  # the variable google-auth reads
DEFAULT_HOST = "metadata.google.internal"
DMI_PRODUCT_NAME = "/sys/class/dmi/id/product_name"
GCE_PRODUCT_NAMES = ("Google Compute Engine", "Google")
# Runtimes on Compute Engine that are not the user's own VM.
MANAGED_RUNTIME_ENV = ("COLAB_RELEASE_TAG", "KAGGLE_KERNEL_RUN_TYPE")
PREEMPTED = "instance/preempted"
MAINTENANCE = "instance/maintenance-event"
POLL_SECONDS = 60  # the server answers a long poll by then even if nothing changed
RETRY_SECONDS = 5.0  # after an error: the server is local, it comes back fast


class Steering(Protocol):
    """What a notice acts through (the agent's controls, from above)."""

    def preempt(self, reason: str) -> None: ...

    def request_save(self) -> None: ...


def on_compute_engine(
    env: Mapping[str, str] | None = None, dmi_path: str | None = None
) -> bool:
    """True on a Compute Engine or Cloud TPU VM of the user's own (see above)."""
    env = os.environ if env is None else env
    dmi_path = DMI_PRODUCT_NAME if dmi_path is None else dmi_path
    if env.get(HOST_ENV):
        return True
    if any(env.get(name) for name in MANAGED_RUNTIME_ENV):
        return False
    try:
        with open(dmi_path, encoding="utf-8") as handle:
            product = handle.read().strip()
    except OSError:
        return False
    return product in GCE_PRODUCT_NAMES


def verdict(path: str, value: str) -> str | None:
    """What a metadata value asks for: ``"preempt"``, ``"save"`` or None."""
    value = value.strip().upper()
    if path == PREEMPTED:
        return "preempt" if value == "TRUE" else None
    if value in ("", "NONE"):
        return None
    if value.startswith("TERMINATE"):
        return "preempt"
    return "save"  # a live migration, or an event we do not know: save anyway


class NoticeWatcher:
    """Long-polls the metadata paths on daemon threads; calls back on a change.

    Args:
        on_notice: called with ``(path, value, verdict)`` for a value that
            asks for something (:func:`verdict`), at most once per path and
            value.
        host: ``host[:port]`` of the metadata server (default: from
            ``GCE_METADATA_HOST``, else ``metadata.google.internal``).
        paths: the metadata paths to watch.
    """

    def __init__(
        self,
        on_notice: Callable[[str, str, str], None],
        *,
        host: str | None = None,
        paths: tuple[str, ...] = (PREEMPTED, MAINTENANCE),
        poll_seconds: int = POLL_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.host = host or os.environ.get(HOST_ENV) or DEFAULT_HOST
        self._on_notice = on_notice
        self._paths = paths
        self._poll = poll_seconds
        self._retry = retry_seconds
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._warned = False  # one warning per watcher, then debug lines
        self._threads = [
            threading.Thread(
                target=self._watch, args=(path,), name=f"notice:{path}", daemon=True
            )
            for path in paths
        ]

    def start(self) -> NoticeWatcher:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """No callbacks after this returns; a poll in flight is abandoned
        (the threads are daemons, waiting on a local server)."""
        self._stopped.set()

    def _get(self, path: str, etag: str | None) -> tuple[str, str | None]:
        url = f"http://{self.host}/computeMetadata/v1/{path}"
        timeout = 10.0
        if etag is not None:
            query = {"wait_for_change": "true", "last_etag": etag}
            query["timeout_sec"] = str(self._poll)
            url += "?" + urllib.parse.urlencode(query)
            timeout += self._poll
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            value = response.read().decode("utf-8", "replace")
            return value, response.headers.get("ETag") or etag or ""

    def _watch(self, path: str) -> None:
        etag: str | None = None
        acted: set[str] = set()
        while not self._stopped.is_set():
            try:
                value, etag = self._get(path, etag)
            except Exception as exc:
                # Anything: a refused connection, an answer that is not HTTP
                # or cut short (http.client's errors are no OSError). A
                # watcher that ended here would miss the notice that follows.
                self._failed(path, exc)
                etag = None  # start over with a plain read
                self._stopped.wait(self._retry)
                continue
            asked = verdict(path, value)
            if asked is None:
                acted.clear()  # a later notice is a new one
            elif value not in acted and not self._stopped.is_set():
                acted.add(value)
                self._on_notice(path, value.strip(), asked)

    def _failed(self, path: str, exc: Exception) -> None:
        """Log a failed read: the first of a watcher's as a warning, then quietly."""
        with self._lock:
            first, self._warned = not self._warned, True
        if first and not isinstance(exc, urllib.error.URLError):
            log.warning(
                "metadata server %s: reading %s failed (%s: %s); still watching",
                self.host,
                path,
                type(exc).__name__,
                exc,
            )
        else:
            log.debug("metadata %s: %s: %s; retrying", path, type(exc).__name__, exc)


@contextlib.contextmanager
def watching(
    setting: bool | None, controls: Steering, events: EventLog
) -> Iterator[NoticeWatcher | None]:
    """Watch for notices while training (``setting`` None: on Compute Engine).

    A preemption notice preempts through ``controls`` (as SIGTERM does); a
    migration asks for a checkpoint.
    """
    if not (on_compute_engine() if setting is None else setting):
        yield None
        return

    def on_notice(path: str, value: str, asked: str) -> None:
        if asked == "preempt":
            controls.preempt(f"metadata: {path} {value}")
        else:
            controls.request_save()
        events.emit(
            "preemption.notice",
            f"metadata server: {path} = {value}: "
            + (
                "checkpointing and stopping at the next step"
                if asked == "preempt"
                else "checkpointing at the next step"
            ),
            level="warning",
            path=path,
            value=value,
        )

    watcher = NoticeWatcher(on_notice).start()
    log.info("watching the metadata server at %s for preemption notices", watcher.host)
    try:
        yield watcher
    finally:
        watcher.stop()

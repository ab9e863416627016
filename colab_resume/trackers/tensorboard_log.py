"""Keras' TensorBoard callback, continued across sessions without doubled steps.

The agent already carries the callback's step counters in every checkpoint
(:mod:`colab_resume.agent.callback_state`), so a resumed session logs at the
run's step, not from 0. What that leaves: a session trains again from its
last checkpoint, so the steps between that checkpoint and the death are
written twice, once by the dead session and once by the new one.

TensorBoard has a rule for exactly this: an event ``SessionLog(START)`` at
step *s* makes it discard every event it has read so far, in that run
(directory), at step *s* or later; the first ``START`` of a run only marks
its beginning. (Rustboard, TensorBoard's fast loader, discards per series
when a step goes backwards, which the same layout satisfies.) So at every
start and resume this callback writes one small event file holding
``START`` at the first step the session will log, named so that it sorts
after every file of the earlier sessions and just before the file the
session's own writer fills: TensorBoard reads a run's files in name order.

One step axis: epoch summaries (``epoch_loss``...) and weight histograms go
at the step the epoch ended (the run's global batch count) rather than at
the epoch's index, so the restart rule covers them too.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

from colab_resume.storage import Storage
from colab_resume.trackers.identity import claim_identity, safe_uri, storage_of

# TensorBoard reads a file whose name contains this, in name order.
_EVENTS = "tfevents"
# The event format version TensorFlow 2 writers declare: a run whose first
# file says 2 or more is purged by SessionLog.START (older: by step order).
FILE_VERSION = b"brain.Event:2"
SESSION_LOG_START = 1


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def event_bytes(
    wall_time: float,
    step: int,
    *,
    file_version: bytes | None = None,
    session_start: bool = False,
) -> bytes:
    """One serialized ``tensorboard.Event`` proto, written by hand.

    Only the fields this module needs: ``wall_time`` (1, double), ``step``
    (2, int64), ``file_version`` (3, string), ``session_log`` (7, message
    ``SessionLog``, whose ``status`` is field 1). No protobuf package is
    needed to write it.
    """
    out = b"\x09" + struct.pack("<d", wall_time)
    if step:
        out += b"\x10" + _varint(step)
    if file_version is not None:
        out += b"\x1a" + _varint(len(file_version)) + file_version
    if session_start:
        session_log = b"\x08" + _varint(SESSION_LOG_START)
        out += b"\x3a" + _varint(len(session_log)) + session_log
    return out


def _masked_crc(data: bytes) -> bytes:
    import google_crc32c

    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def tf_record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord: length, its CRC, data, its CRC."""
    length = struct.pack("<Q", len(data))
    return length + _masked_crc(length) + data + _masked_crc(data)


def restart_file(step: int, wall_time: float | None = None) -> bytes:
    """An event file's bytes: the format version, then ``START`` at ``step``."""
    now = time.time() if wall_time is None else wall_time
    return tf_record(event_bytes(now, 0, file_version=FILE_VERSION)) + tf_record(
        event_bytes(now, step, session_start=True)
    )


def restart_name(existing: list[str], *, host: str, pid: int, now: float) -> str:
    """A name for the ``START`` file that sorts after ``existing``, before the next.

    TensorFlow names an event file ``events.out.tfevents.<seconds>.<host>.<pid>.
    <n>.v2``, so the one this process's writer creates next sorts after
    ``events.out.tfevents.<seconds now>.<host>.<pid>`` (a proper prefix of it
    in the same second, smaller at the seconds otherwise), and earlier
    sessions' files, with earlier seconds, sort before it. Where an
    existing file does not (this process wrote one this second), the name
    goes right after that file instead.
    """
    name = f"events.out.{_EVENTS}.{int(now):010d}.{host}.{pid}"
    last = max(existing, default="")
    return name if name > last else f"{last}.restart"


def restart_name_before(writer_file: str) -> str:
    """The name that sorts just before ``writer_file`` and after what precedes it:
    a proper prefix of it (less its last dotted part, ``.v2``)."""
    base = writer_file.rpartition(".")[0]
    return base if _EVENTS in base else writer_file[:-1]


class RestartMarks:
    """Writes the ``START`` files into a log directory's run folders.

    Local paths are written directly; a URL (``gs://``...) goes through
    :class:`~colab_resume.storage.Storage`, as TensorFlow's writer reaches it.
    """

    def __init__(self, log_dir: str, storage_options: dict[str, Any] | None) -> None:
        self.log_dir = log_dir
        self._storage = (
            None
            if "://" not in log_dir
            else Storage(log_dir.rstrip("/"), storage_options)
        )

    def _event_files(self, folder: str) -> list[str]:
        if self._storage is None:
            path = os.path.join(self.log_dir, folder)
            names = os.listdir(path) if os.path.isdir(path) else []
        else:
            prefix = folder + "/"
            names = [
                item.path[len(prefix) :]
                for item in self._storage.list(prefix)
                if "/" not in item.path[len(prefix) :]
            ]
        return sorted(name for name in names if _EVENTS in name)

    def _write(self, folder: str, name: str, data: bytes) -> None:
        if self._storage is None:
            os.makedirs(os.path.join(self.log_dir, folder), exist_ok=True)
            with open(os.path.join(self.log_dir, folder, name), "wb") as handle:
                handle.write(data)
        else:
            self._storage.write_bytes(f"{folder}/{name}", data)

    def before_writer(self, folder: str, step: int) -> str:
        """``START`` at ``step`` in ``folder``, before its writer creates its file."""
        name = restart_name(
            self._event_files(folder),
            host=socket.gethostname(),
            pid=os.getpid(),
            now=time.time(),
        )
        self._write(folder, name, restart_file(step))
        return name

    def before_newest(self, folder: str, step: int) -> str | None:
        """``START`` at ``step`` in ``folder``, just before its newest file (the
        writer's, created before the step was known). None: no file yet."""
        files = self._event_files(folder)
        if not files:
            return None
        name = restart_name_before(files[-1])
        self._write(folder, name, restart_file(step))
        return name


def continued_tensorboard_class() -> type:
    """The ``keras.callbacks.TensorBoard`` subclass :func:`tensorboard` returns
    (:class:`~colab_resume.trackers.keras_tensorboard.ContinuedTensorBoard`).

    Its module imports Keras at the top, so it is imported on first use:
    importing colab_resume never imports Keras.
    """
    from colab_resume.trackers.keras_tensorboard import ContinuedTensorBoard

    return ContinuedTensorBoard


def tensorboard(agent: Any, log_dir: str | None = None, **kwargs: Any) -> Any:
    """A ``keras.callbacks.TensorBoard`` that continues one log across sessions.

    Pass it to ``agent.fit(..., callbacks=[...])``. Every session logs into
    the same directory at the run's global step, and what a killed session
    logged after its last checkpoint is dropped by TensorBoard when the next
    session logs those steps again (see this module's docstring).

    Args:
        agent: the run's :class:`~colab_resume.Agent`.
        log_dir: the TensorBoard log directory (local, or ``gs://``). None:
            the one the run's first session used (kept in the run
            directory); in the first session, ``<run_dir>/tensorboard``.
        **kwargs: passed to ``keras.callbacks.TensorBoard`` (``update_freq``,
            ``histogram_freq``...).
    """
    storage = storage_of(agent)
    chosen = log_dir or _default_log_dir(agent.run_dir)
    shown = _recordable(chosen)
    recorded, _ = claim_identity(storage, "tensorboard", lambda: {"log_dir": shown})
    if log_dir is None:
        chosen = shown = str(recorded["log_dir"])
    elif recorded["log_dir"] != shown:
        agent.events.emit(
            "tracker.moved",
            f"TensorBoard: logging to {shown}, not to {recorded['log_dir']} "
            f"where this run's first session logged: one run, two log "
            f"directories",
            level="warning",
        )
    agent.events.emit("tracker.tensorboard", f"TensorBoard logs in {shown}")
    marks = RestartMarks(chosen, agent.options.storage_options)
    return continued_tensorboard_class()(chosen, marks, **kwargs)


def _recordable(log_dir: str) -> str:
    """``log_dir`` as the run directory may keep it: a URL without userinfo
    or query (a local path as it is: ``?`` and ``#`` are a file name's)."""
    return safe_uri(log_dir) if "://" in log_dir else log_dir


def _default_log_dir(run_dir: str) -> str:
    scheme = run_dir.split("://")[0] if "://" in run_dir else ""
    if scheme not in ("", "gs"):  # TensorFlow's writer reaches disks and GCS
        raise ValueError(
            f"TensorBoard cannot write into {run_dir}: pass log_dir=, a local "
            f"path or a gs:// URL (e.g. cr.trackers.tensorboard(agent, "
            f"'/content/tb'))."
        )
    return run_dir.rstrip("/") + "/tensorboard"

"""The run's metrics and events, kept in the run directory across sessions.

GCS has no append, so the history is a series of small create-only chunks,
one series per lease::

    history/00000003-000017.json   lease 3, its 18th chunk

Each chunk holds the metric samples and the events since the previous one:

```
{"format": 1, "lease": 3, "seq": 17, "session_id": "...", "written_at": 1.7e9,
 "points": [[step, wall_time, {"loss": 0.31, ...}], ...],
 "events": [{"time": ..., "kind": "recovery.started", "level": "warning",
             "step": 1200, "message": "..."}, ...]}
```

An event of a few kinds also keeps a few of its details, as ``"data"``
(:mod:`colab_resume.report.event_data`).

The agent samples metrics at most once a second (from the panel tick),
and writes a chunk every ``flush_seconds``, soon after a checkpoint commits
(at the next tick after the session's first commit, then at most one per
10 s) and at the end of the session, on a background thread — never per
step, never blocking training. A
session that dies loses at most its last unwritten chunk (all of them if it
dies before its first): the report still draws it, to the step of its last
heartbeat, from the records every session commits
(:mod:`colab_resume.report.sessions`).

Chunks read back are untrusted: size, depth and numbers bounded by
:meth:`Storage.read_json` (:mod:`colab_resume.parsing`), every
field type-checked, damaged chunks reported and skipped.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from colab_resume.errors import CorruptRecordError
from colab_resume.events import Event, EventLog
from colab_resume.parsing import MAX_RECORD_BYTES, decode, is_number
from colab_resume.protocol.rundir import HISTORY_DIR, chunk_path, parse_chunk_name
from colab_resume.report.event_data import kept
from colab_resume.storage import Storage
from colab_resume.timings import Timings

log = logging.getLogger(__name__)

FORMAT = 1
# A checkpoint commit asks for a chunk, but not more often than this.
COMMIT_FLUSH_MIN_SECONDS = 10.0
MAX_POINTS_PER_CHUNK = 5_000
MAX_EVENTS_PER_CHUNK = 500
MAX_METRICS_PER_POINT = 16
MAX_MESSAGE_CHARS = 300
MAX_CHUNKS_READ = 5_000
# Points a reader keeps in memory, all chunks together (each chunk may
# hold 5,000, parsed at ~1 KB a point): old chunks are thinned to an even
# share of this, the newest ones keep full resolution.
MAX_POINTS_KEPT = 20_000
# Events likewise (a chunk may hold 500, at ~10 KB each parsed): old chunks
# keep an even share of this, what the report reads from them first.
MAX_EVENTS_KEPT = 5_000
FULL_RESOLUTION_CHUNKS = 2
# The kinds the report reads to tell where a session began and how it
# ended (:mod:`colab_resume.report.sessions`): kept first when thinning.
LANDMARK_KINDS = (
    "lease.taken",
    "lease.takeover",
    "lease.previous_dead",
    "lease.fenced",
    "run.resumed_at",
    "checkpoint.restored",
    "run.runtime_changed",
    "run.completed",
    "recovery.started",
)
COMMITTED_KIND = "checkpoint.committed"  # a tick each: kept next
# Too chatty to keep: progress of one upload, the countdown's repeats.
QUIET_KINDS = ("checkpoint.upload.progress",)


@dataclasses.dataclass(frozen=True)
class Point:
    """One metric sample: ``metrics`` after ``step`` steps, at wall ``time``."""

    step: int
    time: float
    metrics: dict[str, float]
    lease: int = 0


@dataclasses.dataclass(frozen=True)
class RecordedEvent:
    """An event as the history keeps it: ``data``, the details kept of its
    kind (:func:`colab_resume.report.event_data.kept`)."""

    time: float
    kind: str
    level: str
    step: int | None
    message: str
    lease: int = 0
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunHistory:
    """Everything the history chunks of a run say, ordered by lease and time."""

    points: list[Point] = dataclasses.field(default_factory=list)
    events: list[RecordedEvent] = dataclasses.field(default_factory=list)
    sessions: dict[int, str] = dataclasses.field(default_factory=dict)  # lease -> id
    problems: list[str] = dataclasses.field(default_factory=list)
    # lease -> what its newest chunk said it had measured
    timings: dict[int, Timings] = dataclasses.field(default_factory=dict)
    # Older chunks a bounded read (``HistoryReader(newest_bytes=...)``) left
    # out, and the lease of the oldest chunk it read (None: all were read).
    left_out: int = 0
    from_lease: int | None = None


class HistoryRecorder:
    """Collects samples and events of one agent; writes them as chunks.

    Args:
        events: the agent's event log (subscribed to at once, so events
            from before the lease is taken — the wait — are kept too).
        flush_seconds: time between chunks.
        clock: wall clock, injectable.
        monotonic: monotonic clock, injectable.
        keep_in_memory: samples kept for the panel's chart.
    """

    def __init__(
        self,
        events: EventLog,
        *,
        flush_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        keep_in_memory: int = 2_000,
    ) -> None:
        self.flush_seconds = flush_seconds
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._pending_points: list[Point] = []
        self._pending_events: list[RecordedEvent] = []
        self.recent: collections.deque[Point] = collections.deque(maxlen=keep_in_memory)
        self._storage: Storage | None = None
        self._lease = 0
        self._session_id = ""
        self._seq = 0
        self._next_flush = monotonic() + flush_seconds
        self._last_flush = monotonic()
        self._committed_before = False  # has this session committed a checkpoint?
        self._writer: threading.Thread | None = None
        self.failures = 0
        # The session's tally, sent whole with every chunk (the loop sets it).
        self.timings: Timings | None = None
        self._sent_timings: dict[str, float | int] | None = None
        events.subscribe(self._on_event)

    def start(self, storage: Storage, lease: int, session_id: str) -> None:
        """A session took the run: chunks now go to ``history/<lease>-*.json``."""
        with self._lock:
            if (self._storage, self._lease) != (storage, lease):
                self._seq = 0
            self._storage, self._lease, self._session_id = storage, lease, session_id
        self._committed_before = False
        self._next_flush = self._monotonic() + self.flush_seconds

    def sample(self, step: int, metrics: dict[str, Any]) -> None:
        """Record the metrics after ``step`` steps (call at most ~once a second)."""
        clean = _clean_metrics(metrics)
        point = Point(step, self._clock(), clean, self._lease)
        with self._lock:
            self._pending_points.append(point)
            del self._pending_points[:-MAX_POINTS_PER_CHUNK]
        self.recent.append(point)

    def maybe_flush(self) -> None:
        """Write a chunk in the background when one is due (cheap otherwise)."""
        if self._monotonic() >= self._next_flush:
            self.flush()

    def flush(self, *, wait: bool = False, timeout: float = 30.0) -> None:
        """Write what is pending as the next chunk, on a background thread."""
        self._last_flush = self._monotonic()
        self._next_flush = self._last_flush + self.flush_seconds
        if self._writer is not None and self._writer.is_alive():
            if not wait:
                return  # the previous chunk is still being written; next time
            self._writer.join(timeout)
        chunk = self._take_chunk()
        if chunk is None:
            return
        self._writer = threading.Thread(
            target=self._write, args=chunk, name="colab-resume-history", daemon=True
        )
        self._writer.start()
        if wait:
            self._writer.join(timeout)

    def _take_chunk(self) -> tuple[Storage, str, dict[str, Any]] | None:
        with self._lock:
            storage = self._storage
            timings = self.timings.to_json() if self.timings is not None else None
            news = timings is not None and timings != self._sent_timings
            if storage is None or not (
                self._pending_points or self._pending_events or news
            ):
                return None
            self._sent_timings = timings
            points, self._pending_points = self._pending_points, []
            events = self._pending_events[:MAX_EVENTS_PER_CHUNK]
            del self._pending_events[:MAX_EVENTS_PER_CHUNK]
            path = chunk_path(self._lease, self._seq)
            self._seq += 1
            record = {
                "format": FORMAT,
                "lease": self._lease,
                "seq": self._seq - 1,
                "session_id": self._session_id,
                "written_at": self._clock(),
                "points": [[p.step, p.time, p.metrics] for p in points],
                "events": [_event_record(e) for e in events],
            }
            if timings is not None:
                record["timings"] = timings
        return storage, path, record

    def _write(self, storage: Storage, path: str, record: dict[str, Any]) -> None:
        try:
            storage.write_json(path, record, create_only=True)
            self.failures = 0
        except Exception as exc:  # history is best effort: never break training
            self.failures += 1
            log.warning("history: could not write %s: %s", path, exc)

    def _on_event(self, event: Event) -> None:
        if event.kind == "checkpoint.committed":
            # Keep the history as durable as the training state: a session
            # killed outright then loses only what its checkpoint loses too.
            # (Written at the next tick, at most one chunk per 10 s — except
            # after the session's first commit: a session killed in its first
            # seconds would otherwise have committed work and no history.)
            if self._committed_before:
                soon = self._last_flush + COMMIT_FLUSH_MIN_SECONDS
            else:
                soon = self._monotonic()
                self._committed_before = True
            self._next_flush = min(self._next_flush, soon)
        if event.kind in QUIET_KINDS:
            return
        recorded = RecordedEvent(
            event.time,
            event.kind,
            event.level,
            event.step,
            event.message[:MAX_MESSAGE_CHARS],
            self._lease,
            kept(event.kind, event.data),
        )
        with self._lock:
            self._pending_events.append(recorded)
            del self._pending_events[: -MAX_EVENTS_PER_CHUNK * 4]


def _event_record(event: RecordedEvent) -> dict[str, Any]:
    record: dict[str, Any] = {
        "time": event.time,
        "kind": event.kind,
        "level": event.level,
        "step": event.step,
        "message": event.message,
    }
    if event.data:  # older readers ignore it
        record["data"] = event.data
    return record


def _clean_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    clean: dict[str, float] = {}
    for key, value in list(metrics.items())[:MAX_METRICS_PER_POINT]:
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            clean[str(key)[:64]] = number
    return clean


# --- reading -------------------------------------------------------------------------


def read_history(storage: Storage, *, workers: int = 16) -> RunHistory:
    """Read and check every history chunk of the run in ``storage``.

    Damaged chunks are skipped and named in ``problems``; they never raise.
    """
    return HistoryReader(storage, workers=workers).read()


class HistoryReader:
    """Reads a run's history; each :meth:`read` fetches only new chunks.

    Memory stays bounded however many chunks the run has: chunks are
    fetched ``workers`` at a time and parsed one at a time, and all but the
    newest :data:`FULL_RESOLUTION_CHUNKS` keep an even share of
    :data:`MAX_POINTS_KEPT` points and of :data:`MAX_EVENTS_KEPT` events
    (thinned again as chunks arrive).

    Args:
        storage: the run directory.
        workers: chunks fetched at once.
        newest_bytes: read only the newest chunks, as many as fit in this
            many bytes (at least one): a bounded tail, for a reader that
            must answer fast whatever the history's size (``status``).
            None: every chunk.
    """

    def __init__(
        self, storage: Storage, *, workers: int = 16, newest_bytes: int | None = None
    ) -> None:
        self.storage = storage
        self.workers = workers
        self.newest_bytes = newest_bytes
        self._chunks: dict[str, RunHistory] = {}  # path -> its parsed content

    def read(self) -> RunHistory:
        names, sizes = [], {}
        for info in self.storage.list(HISTORY_DIR + "/"):
            parts = info.path.split("/")
            parsed = parse_chunk_name(parts[-1]) if len(parts) == 2 else None
            if parsed is not None:
                names.append((parsed, info.path))
                sizes[info.path] = info.size
        names.sort()
        history = RunHistory()
        if self.newest_bytes is not None:
            kept = _newest_within(names, sizes, self.newest_bytes)
            history.left_out, names = len(names) - kept, names[len(names) - kept :]
            if history.left_out:
                history.from_lease = names[0][0][0]
        if len(names) > MAX_CHUNKS_READ:
            history.problems.append(
                f"{len(names)} history chunks; reading the newest {MAX_CHUNKS_READ}"
            )
            names = names[-MAX_CHUNKS_READ:]
        share = max(2, MAX_POINTS_KEPT // len(names)) if names else 0
        event_share = max(4, MAX_EVENTS_KEPT // len(names)) if names else 0
        recent = {path for _, path in names[-FULL_RESOLUTION_CHUNKS:]}
        new = [(lease, path) for (lease, _), path in names if path not in self._chunks]
        workers = max(1, min(self.workers, len(new)))
        with ThreadPoolExecutor(workers) as pool:
            for start in range(0, len(new), workers):
                batch = new[start : start + workers]
                fetched = pool.map(self._fetch, batch)
                for (lease, path), data in zip(batch, fetched, strict=True):
                    chunk = self._parse(lease, path, data)
                    if path not in recent:  # thin at once: old chunks stay small
                        _thin_chunk(chunk, share, event_share)
                    self._chunks[path] = chunk
        for _, path in names:
            chunk = self._chunks[path]
            if path not in recent:
                _thin_chunk(chunk, share, event_share)
            history.points.extend(chunk.points)
            history.events.extend(chunk.events)
            history.sessions.update(chunk.sessions)
            history.problems.extend(chunk.problems)
            history.timings.update(chunk.timings)  # names sorted: the newest wins
        history.points.sort(key=lambda p: (p.lease, p.time, p.step))
        history.events.sort(key=lambda e: e.time)
        return history

    def _fetch(self, item: tuple[int, str]) -> bytes | Exception:
        try:
            return self.storage.read_bytes(item[1], max_bytes=MAX_RECORD_BYTES)
        except (CorruptRecordError, FileNotFoundError) as exc:
            return exc

    def _parse(self, lease: int, path: str, data: bytes | Exception) -> RunHistory:
        chunk = RunHistory()
        try:
            if isinstance(data, Exception):
                raise data
            where = f"{self.storage.url}/{path}"
            parse_chunk(decode(data, where), lease, where, chunk)
        except (CorruptRecordError, FileNotFoundError) as exc:
            chunk.problems.append(f"{path}: {exc}")
        return chunk


def _newest_within(
    names: list[tuple[tuple[int, int], str]], sizes: dict[str, int], budget: int
) -> int:
    """How many of the newest chunks fit in ``budget`` bytes (at least one)."""
    kept, spent = 0, 0
    for _, path in reversed(names):
        spent += sizes[path]
        if kept and spent > budget:
            break
        kept += 1
    return kept


def _thin_chunk(chunk: RunHistory, points: int, events: int) -> None:
    chunk.points = _thin(chunk.points, points)
    chunk.events = _thin_events(chunk.events, events)


def _thin_events(events: list[RecordedEvent], keep: int) -> list[RecordedEvent]:
    """At most ``keep`` of ``events``, in their order: the last one (the
    session's latest sign), then landmarks, commits, warnings and errors,
    then the newest of the rest."""
    if len(events) <= keep:
        return events

    def rank(index: int) -> tuple[int, int]:
        event = events[index]
        if index == len(events) - 1:
            group = 0
        elif event.kind in LANDMARK_KINDS:
            group = 1
        elif event.kind == COMMITTED_KIND:
            group = 2
        elif event.level != "info":
            group = 3
        else:
            group = 4
        return group, -index  # newest first within a group

    chosen = sorted(sorted(range(len(events)), key=rank)[:keep])
    return [events[i] for i in chosen]


def _thin(points: list[Point], keep: int) -> list[Point]:
    """``keep`` evenly spaced points of ``points``, the last one included."""
    if len(points) <= keep:
        return points
    stride = len(points) / keep
    return [points[len(points) - 1 - int(i * stride)] for i in range(keep)][::-1]


def parse_chunk(data: dict[str, Any], lease: int, where: str, into: RunHistory) -> None:
    """Check one chunk and add its samples and events to ``into``.

    Raises:
        CorruptRecordError: the chunk's structure is wrong (nothing is added).
    """
    if data.get("format") != FORMAT:
        raise CorruptRecordError(
            f"{where}: unknown history format {data.get('format')!r}; upgrade "
            f"colab_resume to read it."
        )
    points, events = data.get("points"), data.get("events")
    session_id = data.get("session_id")
    if not isinstance(points, list) or not isinstance(events, list):
        raise CorruptRecordError(f"{where}: 'points' and 'events' must be lists.")
    if len(points) > MAX_POINTS_PER_CHUNK or len(events) > MAX_EVENTS_PER_CHUNK:
        raise CorruptRecordError(f"{where}: more entries than any writer makes.")
    new_points = [_parse_point(raw, lease, where) for raw in points]
    new_events = [_parse_event(raw, lease, where) for raw in events]
    timings = data.get("timings")
    if timings is not None:  # absent from chunks of older versions
        into.timings[lease] = Timings.parse(timings, where)
    into.points.extend(new_points)
    into.events.extend(new_events)
    if isinstance(session_id, str):
        into.sessions[lease] = session_id[:64]


def _parse_point(raw: Any, lease: int, where: str) -> Point:
    if (
        not isinstance(raw, list)
        or len(raw) != 3
        or not isinstance(raw[0], int)
        or isinstance(raw[0], bool)
        or raw[0] < 0
        or not is_number(raw[1])
        or not isinstance(raw[2], dict)
        or len(raw[2]) > MAX_METRICS_PER_POINT
    ):
        raise CorruptRecordError(f"{where}: a point is not [step, time, {{metrics}}].")
    metrics = {}
    for key, value in raw[2].items():
        if not isinstance(key, str) or not is_number(value):
            raise CorruptRecordError(f"{where}: metric {key!r} is not a number.")
        metrics[key[:64]] = float(value)
    return Point(raw[0], float(raw[1]), metrics, lease)


def _parse_event(raw: Any, lease: int, where: str) -> RecordedEvent:
    if not isinstance(raw, dict):
        raise CorruptRecordError(f"{where}: an event is not an object.")
    step = raw.get("step")
    fields_ok = (
        is_number(raw.get("time"))
        and isinstance(raw.get("kind"), str)
        and raw.get("level") in ("info", "warning", "error")
        and isinstance(raw.get("message"), str)
        and (step is None or (isinstance(step, int) and not isinstance(step, bool)))
    )
    if not fields_ok:
        raise CorruptRecordError(
            f"{where}: an event lacks time/kind/level/message or has wrong types."
        )
    kind = raw["kind"][:64]
    data = raw.get("data")
    return RecordedEvent(
        float(raw["time"]),
        kind,
        raw["level"],
        step,
        raw["message"][:MAX_MESSAGE_CHARS],
        lease,
        kept(kind, data) if isinstance(data, dict) else {},
    )

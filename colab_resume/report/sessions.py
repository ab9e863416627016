"""Every session of a run and how it ended: the run report's data model.

The history chunks (:mod:`colab_resume.report.history`) carry the loss
curve, but a session writes its first chunk only at a tick after its
first commit: one killed seconds after it started may have none, and one
killed later has lost the samples since its last chunk. So the sessions
themselves come from what every session commits anyway:

* ``lease/N.json`` — that session existed, who it was and when it started
  (the object's time, by the storage server's clock);
* ``heartbeat/N.json`` — its last beat: the step it had reached, the state
  it was in and (the object's time) when it last showed life. A clean end
  is the last beat's state: ``stopped`` (``stop()``, SIGTERM, Ctrl-C),
  ``completed``, ``failed``, ``fenced``; a beat that still says
  ``training`` with a successor after it is a death;
* ``checkpoints/`` — the committed checkpoints still there, by step and
  lease (older ones are pruned: the history's ``checkpoint.committed``
  events remember those);
* the history's events — where each session resumed (``run.resumed_at``)
  and whether its successor judged it dead or took it over; and, where no
  history survives, the successor's lease, which records the verdict it
  acted on (``previous_state``). A restore
  (``checkpoint.restored``) names the checkpoint it read, and so the lease
  that committed it: a commit pruned since, by a session killed before its
  history said so, is still known.

A session's furthest step is the largest its beat, its samples and its
commits show (beats and commits do not wait for each other: a session
killed after a commit may have beaten last at an earlier step); the steps
its successor redid run from where that successor restored to there. Its
end is its last sign of life: its last beat, or a later commit still
listed.

Reading is linear in what is read: the history's samples and events are
indexed by lease once (:class:`_ByLease`), and the sessions are the leases
the run has (a lease the history names above the newest lease record never
took the run; it is a problem, not a session). Where the history read is
its newest chunks only (``status``), the sessions are those chunks' (from
the oldest one's lease on): the records of older leases are not read.
"""

from __future__ import annotations

import collections
import dataclasses
from concurrent.futures import ThreadPoolExecutor

from colab_resume.errors import CorruptRecordError
from colab_resume.heartbeat.lease import read_lease
from colab_resume.heartbeat.liveness import (
    ALIVE,
    COMPLETED,
    FAILED,
    STALLED,
    RunStatus,
    read_status,
)
from colab_resume.protocol import rundir
from colab_resume.protocol.listing import RunListing
from colab_resume.protocol.records import BeatRecord, LeaseRecord, parse
from colab_resume.protocol.rundir import CheckpointName
from colab_resume.report.history import (
    HistoryReader,
    Point,
    RecordedEvent,
    RunHistory,
)
from colab_resume.report.runtime_change import RuntimeChange, first_of
from colab_resume.storage import ObjectInfo, Storage

# How a session ended.
RUNNING = "running"  # the holder, still beating
DIED = "died"  # vanished without a word (SIGKILL, a VM gone)
STOPPED = "stopped"  # stop(), SIGTERM or Ctrl-C: a final checkpoint, then out
COMPLETED_END = "completed"
FAILED_END = "failed"  # an error it recorded
TAKEN_OVER = "taken over"  # fenced by a newer session while alive
ENDS = (RUNNING, DIED, STOPPED, COMPLETED_END, FAILED_END, TAKEN_OVER)

_CLEAN_BEATS = {
    "stopped": STOPPED,
    "completed": COMPLETED_END,
    "failed": FAILED_END,
    "fenced": TAKEN_OVER,
}


@dataclasses.dataclass(frozen=True)
class Session:
    """One lease of the run, as its records show it.

    Attributes:
        lease: its lease number (sessions are numbered by it).
        session_id, host: who it was; None where its lease is unreadable.
        started_at: when it took the lease (storage server's clock).
        ended_at: its last sign of life (server's clock where known).
        first_step: the step it started training from (its restore point).
        last_step: the furthest step it is known to have reached.
        commits: steps of the checkpoints it committed, as far as known.
        end: one of :data:`ENDS`.
        error: what it failed with (``end == "failed"``).
        redone: ``(from, to)``: the steps the next session trained again,
            from its restore point to this session's last step.
        runtime_changed: what differed from the runtime that wrote the
            checkpoint it resumed from (its ``run.runtime_changed`` event),
            or None.
    """

    lease: int
    session_id: str | None = None
    host: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    commits: tuple[int, ...] = ()
    end: str = DIED
    error: str | None = None
    redone: tuple[int, int] | None = None
    runtime_changed: RuntimeChange | None = None

    @property
    def trained(self) -> bool:
        """It trained at least from a known step (a Take over lease did not)."""
        return self.first_step is not None and self.last_step is not None

    @property
    def died(self) -> bool:
        return self.end == DIED

    def describe(self) -> str:
        """``session 1: died, last seen at step 46 (at least 6 steps redone)``.

        A dead session's last step is its last sign (a beat, a history
        sample): it may have trained further before it died, so the steps
        redone are a lower bound, and said so.
        """
        text = f"session {self.lease}: {self.end}"
        if self.last_step is not None and self.end != RUNNING:
            seen = ", last seen" if self.died else ""
            text += f"{seen} at step {self.last_step}"
        if self.redone:
            count = self.redone[1] - self.redone[0]
            least = "at least " if self.died else ""
            text += (
                f" ({least}{count} step{'s' if count != 1 else ''} redone, "
                f"from step {self.redone[0]})"
            )
        change = self.runtime_changed
        if change is not None:
            verb = "refused to resume" if change.refused else "resumed"
            text += f"; {verb} on another runtime: {change.words}"
        return text


@dataclasses.dataclass
class RunReport:
    """What the report draws: the history plus every session.

    Attributes:
        url: the run directory.
        history: the samples and events of the history chunks.
        sessions: every lease, ascending.
        commits: every committed step known (checkpoints and history).
        problems: damaged records, named; never raised.
    """

    url: str
    history: RunHistory
    sessions: list[Session]
    commits: list[int]
    problems: list[str]

    @property
    def deaths(self) -> list[Session]:
        return [s for s in self.sessions if s.died]

    @property
    def redone_steps(self) -> int:
        return sum(s.redone[1] - s.redone[0] for s in self.sessions if s.redone)


@dataclasses.dataclass
class _Records:
    """What the run directory holds about one lease."""

    lease: int
    record: LeaseRecord | None = None
    taken_at: float | None = None  # lease object's time (server clock)
    beat: BeatRecord | None = None
    beat_at: float | None = None  # heartbeat object's time (server clock)
    commits: set[int] = dataclasses.field(default_factory=set)
    committed_at: float | None = None  # its newest listed manifest's time (server)


def read_report(
    storage: Storage,
    reader: HistoryReader | None = None,
    *,
    listing: RunListing | None = None,
    holder: RunStatus | None = None,
) -> RunReport:
    """Read every session of the run in ``storage`` (damage is a problem, never raised).

    Args:
        storage: the run directory.
        reader: a history reader to reuse (it fetches only new chunks).
        listing, holder: the run's listing and verdict, where the caller
            already read them (``status``): not read twice.
    """
    history = (reader or HistoryReader(storage)).read()
    problems = list(history.problems)
    if listing is None:
        try:
            listing = RunListing.read(storage)
        except CorruptRecordError as exc:  # an absurd lease: draw the history alone
            problems.append(str(exc))
            listing = RunListing(url=storage.url, leases=(), checkpoints=())
    # A tail of the history (``status``): the sessions of its chunks.
    oldest = history.from_lease or 0
    to_read = [lease for lease in listing.leases if lease[0] >= oldest]
    beats_at = {
        info.path: info.updated for info in storage.list(rundir.HEARTBEAT_DIR + "/")
    }

    def records(lease: tuple[int, ObjectInfo]) -> tuple[_Records, list[str]]:
        return _read_records(storage, *lease, beats_at)

    leases: dict[int, _Records] = {}
    with ThreadPoolExecutor(max(1, min(16, len(to_read)))) as pool:
        for found, trouble in pool.map(records, to_read):
            leases[found.lease] = found
            problems += trouble
    for entry in listing.committed:
        if entry.name.lease in leases:
            found = leases[entry.name.lease]
            found.commits.add(entry.name.step)
            manifest = entry.objects.get(rundir.MANIFEST)
            if manifest is not None:
                found.committed_at = max(found.committed_at or 0.0, manifest.updated)
    # A lease the history knows but the listing lacks (its record lost) is
    # still a session; one above the newest lease record never took the run.
    newest = max((n for n, _ in listing.leases), default=None)
    named = {p.lease for p in history.points} | set(history.sessions)
    beyond = sorted(n for n in named if newest is not None and n > newest)
    if beyond:
        problems.append(
            f"the history names {len(beyond)} lease(s) above the newest lease "
            f"record ({newest}), from {beyond[0]}: not sessions of this run"
        )
    for number in named.difference(beyond):
        leases.setdefault(number, _Records(number))
    beyond_set = set(beyond)
    for event in history.events:
        if event.kind == "checkpoint.committed" and event.step is not None:
            if event.lease not in beyond_set:
                leases.setdefault(event.lease, _Records(event.lease)).commits.add(
                    event.step
                )
        read = _restored_from(event)
        if read is not None and oldest <= read.lease <= (newest or read.lease):
            leases.setdefault(read.lease, _Records(read.lease)).commits.add(read.step)
    if holder is None and listing.leases:
        holder = read_status(storage, listing=listing)
    sessions = _sessions(leases, history, holder.state if holder else None)
    commits = {step for found in leases.values() for step in found.commits}
    # Where a session resumed was committed, even if pruned since.
    commits |= {s.first_step for s in sessions if s.first_step}
    return RunReport(storage.url, history, sessions, sorted(commits), problems)


def _read_records(
    storage: Storage, number: int, info: ObjectInfo, beats_at: dict[str, float]
) -> tuple[_Records, list[str]]:
    """Lease ``number``'s record and last beat; damage becomes a problem."""
    found, problems = _Records(number, taken_at=info.updated), []
    try:
        found.record = read_lease(storage, number, info.path)
    except (CorruptRecordError, FileNotFoundError) as exc:
        problems.append(str(exc))
    path = rundir.heartbeat_path(number)
    if path in beats_at:
        found.beat_at = beats_at[path]
        try:
            where = f"{storage.url}/{path}"
            found.beat = parse(BeatRecord, storage.read_json(path), where)
        except (CorruptRecordError, FileNotFoundError) as exc:
            problems.append(str(exc))
    return found, problems


@dataclasses.dataclass
class _ByLease:
    """The history's samples and events of one lease (indexed once)."""

    points: list[Point] = dataclasses.field(default_factory=list)
    events: list[RecordedEvent] = dataclasses.field(default_factory=list)

    @staticmethod
    def index(history: RunHistory) -> dict[int, _ByLease]:
        """Every lease's share of ``history``, in one pass over each list."""
        found: dict[int, _ByLease] = collections.defaultdict(_ByLease)
        for point in history.points:
            found[point.lease].points.append(point)
        for event in history.events:
            found[event.lease].events.append(event)
        return dict(found)


def _sessions(
    leases: dict[int, _Records], history: RunHistory, verdict: str | None
) -> list[Session]:
    numbers = sorted(leases)
    index = _ByLease.index(history)
    nothing = _ByLease()
    firsts: dict[int, int | None] = {}
    committed_before = 0  # the newest commit of the leases before, for inference
    for number in numbers:
        mine = index.get(number, nothing)
        firsts[number] = _first_step(leases[number], mine, committed_before)
        committed_before = max([committed_before, *leases[number].commits])
    # Where the next session that trained restored, for each lease: one
    # pass from the newest.
    restarts: dict[int, int | None] = {}
    following: int | None = None
    for number in reversed(numbers):
        restarts[number] = following
        if firsts[number] is not None:
            following = firsts[number]
    sessions = []
    for i, number in enumerate(numbers):
        found = leases[number]
        mine = index.get(number, nothing)
        successor = leases.get(numbers[i + 1]) if i + 1 < len(numbers) else None
        theirs = index.get(numbers[i + 1], nothing) if successor else nothing
        last = _last_step(found, mine)
        first = firsts[number]
        if first is not None and last is None:
            last = first
        if last is not None and first is not None and last < first:
            last = first
        restart = restarts[number]  # where the next trainer restored
        redone = None
        if restart is not None and last is not None and restart < last:
            redone = (restart, last)
        beat = found.beat
        sessions.append(
            Session(
                lease=number,
                session_id=found.record.session_id if found.record else None,
                host=found.record.host if found.record else None,
                started_at=found.taken_at,
                ended_at=_ended_at(found, mine),
                first_step=first,
                last_step=last if first is not None else None,
                commits=tuple(sorted(found.commits)),
                end=_end(found, mine, successor, theirs, verdict),
                error=beat.error if beat is not None else None,
                redone=redone if first is not None else None,
                runtime_changed=first_of(mine.events),
            )
        )
    return sessions


def _first_step(found: _Records, mine: _ByLease, committed: int) -> int | None:
    """Where the session started training: its own word, else inferred.

    Restore takes the newest committed checkpoint, so a session that left
    no history started from the newest commit of the sessions before it.
    A session with no step at all (a Take over lease, one that failed
    before training) did not train.
    """
    for kind in ("run.resumed_at", "checkpoint.restored"):
        steps = [e.step for e in mine.events if e.kind == kind and e.step is not None]
        if steps:
            return steps[0]
    beat_step = found.beat.step if found.beat is not None else None
    if not mine.points and beat_step is None and not found.commits:
        return None
    if any(e.kind == "lease.taken" for e in mine.events):
        return 0  # its first chunk is here and it restored nothing
    return committed


def _last_step(found: _Records, mine: _ByLease) -> int | None:
    steps = [p.step for p in mine.points]
    steps += list(found.commits)
    if found.beat is not None and found.beat.step is not None:
        steps.append(found.beat.step)
    return max(steps) if steps else None


def _restored_from(event: RecordedEvent) -> CheckpointName | None:
    """The checkpoint a ``checkpoint.restored`` event read (its message names it)."""
    if event.kind != "checkpoint.restored":
        return None
    for word in event.message.split():
        name = CheckpointName.parse(word)
        if name is not None:
            return name
    return None


def _ended_at(found: _Records, mine: _ByLease) -> float | None:
    signs = [t for t in (found.beat_at, found.committed_at) if t is not None]
    if signs:  # the server's clock
        return max(signs)
    times = [p.time for p in mine.points] + [e.time for e in mine.events]
    return max(times) if times else found.taken_at


def _end(
    found: _Records,
    mine: _ByLease,
    successor: _Records | None,
    theirs: _ByLease,
    verdict: str | None,
) -> str:
    """How the session ended; see the module docstring."""
    beat = found.beat
    if beat is not None and beat.state in _CLEAN_BEATS:
        return _CLEAN_BEATS[beat.state]
    kinds = {e.kind for e in mine.events}
    if "lease.fenced" in kinds:
        return TAKEN_OVER
    if "run.completed" in kinds:
        return COMPLETED_END
    if successor is None:  # the holder: judged as status judges it
        if verdict in (ALIVE, STALLED):
            return RUNNING
        if verdict == COMPLETED:
            return COMPLETED_END
        return FAILED_END if verdict == FAILED else DIED
    # The successor's lease says what it judged when it took the run.
    judged = successor.record.previous_state if successor.record else None
    if judged in (ALIVE, STALLED):
        return TAKEN_OVER
    if judged is not None:
        return DIED
    said = {e.kind for e in theirs.events}
    if "lease.takeover" in said:
        return TAKEN_OVER
    if "lease.previous_dead" in said:
        return DIED
    # The successor left no word: was this session still beating when the
    # next lease was taken (a takeover) or silent for longer (dead)? Both
    # times are the storage server's.
    if (
        found.beat_at is not None
        and successor.taken_at is not None
        and found.record is not None
        and successor.taken_at - found.beat_at < found.record.dead_after_seconds
    ):
        return TAKEN_OVER
    return DIED

"""Every host of a multi-process run, judged one by one.

A multi-process lease (JAX, one process per host) has one holder, process
0, but the run lives only while every process does: multi-controller JAX
is not fault tolerant, and one dead host stops the slice at its next
collective. Each process ``k`` beats ``heartbeat/<lease>.p<k>.json``
(:mod:`colab_resume.agent.multihost`); this module reads those beats and
says which host, if any, is dead. The rule (:func:`dead_host`) is the
same for ``status``, ``watch``, ``cr.inspect`` and a session waiting to
take the run (:mod:`colab_resume.heartbeat.liveness` calls it for all):

- a process whose beat says it failed, or left to restart the slice, is dead;
- one whose beat has not been rewritten for ``dead_after`` (the run's own
  threshold, by the storage server's clock, as the holder's beat is
  judged) is dead — unless it said it ended (completed, stopped,
  preempted): a clean end is no death;
- one that never beat, while the lease is older than ``dead_after``, is dead.

Beats are untrusted records: a damaged one is read as no beat.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from colab_resume.errors import CorruptRecordError, UnsafePathError
from colab_resume.protocol import rundir
from colab_resume.storage import Storage

# What a process's beat says when it leaves on purpose: no death.
ENDED = ("completed", "stopped", "preempted", "fenced")
# What it says when it leaves because the slice cannot go on: dead.
LOST = ("failed", "restart")
MAX_PROCESSES = 10_000  # a larger count in a beat is damage


@dataclasses.dataclass(frozen=True)
class HostBeat:
    """One process's last beat, as a reader sees it.

    Attributes:
        process: its index (0 holds the lease).
        host: the machine it runs on, as it said.
        state: what it last said it was doing (None: no readable beat).
        step: the step of that beat.
        updated: when the beat was written, by the server's clock (None:
            no beat).
        age_s: seconds since then, once judged.
        verdict: ``"alive"``, ``"ended"`` or ``"dead"`` (:func:`dead_host`).
        why: one line behind a ``"dead"`` verdict.
    """

    process: int
    host: str | None = None
    state: str | None = None
    step: int | None = None
    updated: float | None = None
    age_s: float | None = None
    verdict: str = "alive"
    why: str = ""


def read_beats(storage: Storage, lease: int) -> tuple[HostBeat, ...]:
    """Lease ``lease``'s per-process beats, not yet judged.

    No listing: process 0's beat (written before training starts) says
    how many processes there are, and a single-process lease has none, so
    a reader of an ordinary run pays one failed stat.

    Returns:
        One :class:`HostBeat` per process (a beat-less one for a process
        that never beat); empty for a lease of one process.
    """
    first = _beat(storage, lease, 0)
    if first is None:
        return ()
    beat, record = first
    count = record.get("processes") if record else None
    if not isinstance(count, int) or not 1 < count <= MAX_PROCESSES:
        return (beat,) if record is None else ()
    beats = [beat]
    for k in range(1, count):
        found = _beat(storage, lease, k)
        beats.append(found[0] if found else HostBeat(k))
    return tuple(beats)


def _beat(
    storage: Storage, lease: int, k: int
) -> tuple[HostBeat, dict[str, Any] | None] | None:
    """Process ``k``'s beat and its record (None: damaged); None: absent."""
    path = rundir.process_heartbeat_path(lease, k)
    try:
        # An unsafe path (a symlinked heartbeat/) is refused, never read
        # as a damaged beat: only the record's content may be damaged.
        info = storage.info(path)
    except FileNotFoundError:
        return None
    record: Any
    try:
        record = storage.read_json(path)
    except FileNotFoundError:
        return None
    except UnsafePathError:
        raise
    except CorruptRecordError:
        record = None
    if not isinstance(record, dict):
        return HostBeat(k, updated=info.updated), None
    step = record.get("step")
    return (
        HostBeat(
            k,
            host=_text(record.get("host")),
            state=_text(record.get("state")),
            step=step if isinstance(step, int) else None,
            updated=info.updated,
        ),
        record,
    )


def judge(
    beats: tuple[HostBeat, ...],
    *,
    now: float,
    dead_after: float,
    lease_age: float | None,
) -> tuple[HostBeat, ...]:
    """Each beat with its age at server time ``now`` and its verdict. Pure.

    See the module docstring for the rule.
    """
    judged = []
    for beat in beats:
        age = None if beat.updated is None else round(max(0.0, now - beat.updated), 1)
        verdict, why = "alive", ""
        name = f"process {beat.process}" + (f" on {beat.host}" if beat.host else "")
        if beat.state in LOST:
            verdict, why = "dead", f"{name} said {beat.state!r}"
        elif beat.state in ENDED:
            verdict = "ended"
        elif age is None:
            if lease_age is not None and lease_age > dead_after:
                verdict = "dead"
                why = f"{name} never beat ({lease_age:.0f}s since the lease)"
        elif age > dead_after:
            verdict = "dead"
            why = f"{name}: no beat for {age:.0f}s (dead after {dead_after:.0f}s)"
        judged.append(dataclasses.replace(beat, age_s=age, verdict=verdict, why=why))
    return tuple(judged)


def follow_run(
    beats: tuple[HostBeat, ...], *, run_dead: bool, run_step: int | None
) -> tuple[HostBeat, ...]:
    """The host lines as the run line judges the run. Pure.

    A process cannot train on without its peers, so once the run is dead
    (its holder's process is gone, or a host is dead) no process of it is
    shown alive: its own beat merely has not aged out yet. And processes
    step in lockstep, so a live one is at the run's step, which a process's
    own beat (written less often) can trail.
    """
    followed = []
    for beat in beats:
        if beat.verdict == "alive" and run_dead:
            beat = dataclasses.replace(
                beat,
                verdict="dead",
                why=f"process {beat.process}: the run is dead, and a process "
                f"of a multi-process run cannot go on alone",
            )
        elif beat.verdict == "alive" and run_step is not None:
            if beat.step is None or beat.step < run_step:
                beat = dataclasses.replace(beat, step=run_step)
        followed.append(beat)
    return tuple(followed)


def dead_host(beats: tuple[HostBeat, ...]) -> str | None:
    """Why the run is dead for one of its hosts; None while every host lives."""
    dead = [b.why for b in beats if b.verdict == "dead"]
    if not dead:
        return None
    return "; ".join(dead) + " (the slice cannot go on without it)"


def _text(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) else None

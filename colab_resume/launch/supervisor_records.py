"""A supervisor's records, and its judgements: of other supervisors, of a relaunch.

```
supervisor/00000001.json             create-only: who, the program, a hash of the
                                     command, its limits, its beat promise
supervisor/00000001.beat.json        overwritten every beat: watching, relaunching,
                                     or closed when it ended
supervisor/00000001.relaunches.json  overwritten: every relaunch it made
```

A supervisor is a session of its own: it beats, and another supervisor
judges it by the rules a session is judged by
(:func:`colab_resume.heartbeat.liveness.sign_age` and
:func:`~colab_resume.heartbeat.liveness.judge`): ages between two readings
of the storage server's clock, the record's own ``dead_after_seconds``
promise, a stamp from the future ignored as damage. A record that cannot
be read, or that promises no bounded threshold, is UNREADABLE; one whose
last beat said ``closed`` is CLOSED. Only an ALIVE newer supervisor takes a
run over.

The relaunch command never reaches these records: it may carry a secret
(``env WANDB_API_KEY=... python train.py``, ``--hf-token hf_...``), and
no pattern recognises every secret. A record keeps what its readers need
by construction: the program's name and a SHA-256 of the whole command
(:func:`command_facts`), which tells two supervisors' commands apart
without saying either.

A relaunch has started when its session proves it (:func:`judge_start`):
a checkpoint committed, or the run held for a stated time; the run's
limits count the relaunches that did not (:func:`failures_in_a_row`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shlex
import threading
import time
from typing import Any

from colab_resume.errors import StorageError
from colab_resume.heartbeat import liveness
from colab_resume.protocol import rundir
from colab_resume.protocol.listing import RunListing
from colab_resume.storage import ObjectInfo, Storage
from colab_resume.storage.faults import brief

log = logging.getLogger(__name__)

ALIVE = liveness.ALIVE
DEAD = liveness.DEAD
CLOSED = "CLOSED"
UNREADABLE = "UNREADABLE"
# A promise above this is no promise: a planted record saying "dead after
# a year" would hold the run for a year.
MAX_DEAD_AFTER_SECONDS = 3_600.0
# Silence that makes a supervisor dead, in beats (a slow write or two may pass).
BEATS_TO_DEAD = 5
MIN_DEAD_AFTER_SECONDS = 10.0


def beat_path(number: int) -> str:
    """Supervisor ``number``'s beat (overwritten by it alone)."""
    return rundir.supervisor_beat_path(number)


def dead_after(beat_seconds: float) -> float:
    """The silence after which a supervisor beating every ``beat_seconds`` is dead."""
    return max(MIN_DEAD_AFTER_SECONDS, BEATS_TO_DEAD * beat_seconds)


def command_facts(argv: list[str]) -> dict[str, str]:
    """What a record may keep of a command: the program's name and a hash.

    The program is the base name of the first word (``python``, ``gcloud``,
    ``env``); a path before it may name a user's folder, and what follows
    it may be a secret.
    """
    return {
        "program": os.path.basename(argv[0]) if argv else "",
        "command_sha256": hashlib.sha256(shlex.join(argv).encode()).hexdigest(),
    }


def describe_command(argv: list[str]) -> str:
    """A command as console lines show it: ``python (command sha256 1a2b3c4d5e6f)``."""
    facts = command_facts(argv)
    return f"{facts['program']} (command sha256 {facts['command_sha256'][:12]})"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What one supervisor's records say of it.

    Attributes:
        number: its record's number.
        state: ALIVE, DEAD, CLOSED or UNREADABLE.
        detail: one line: why.
    """

    number: int
    state: str
    detail: str


def _promise(record: Any) -> float | None:
    value = record.get("dead_after_seconds") if isinstance(record, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value <= MAX_DEAD_AFTER_SECONDS else None


def judge_supervisor(storage: Storage, number: int) -> Verdict:
    """Supervisor ``number``, judged by the session rules at the server's now.

    Raises:
        StorageUnavailableError: an outage; the caller waits it out.
    """
    where = f"{storage.url}/{rundir.supervisor_path(number)}"
    try:
        record_info = storage.info(rundir.supervisor_path(number))
        record = storage.read_json(rundir.supervisor_path(number))
    except (FileNotFoundError, ValueError) as exc:  # CorruptRecordError is one
        return Verdict(number, UNREADABLE, f"{where} is unreadable ({brief(exc)})")
    promise = _promise(record)
    if promise is None:
        return Verdict(
            number,
            UNREADABLE,
            f"{where} promises no dead_after_seconds in (0, "
            f"{MAX_DEAD_AFTER_SECONDS:.0f}]",
        )
    beat: Any = None
    beat_info: ObjectInfo | None = None
    try:
        beat_info = storage.info(beat_path(number))
        beat = storage.read_json(beat_path(number))
    except FileNotFoundError:
        pass
    except ValueError:  # a damaged beat is no sign of life
        beat_info = None
    if isinstance(beat, dict) and beat.get("state") == "closed":
        return Verdict(number, CLOSED, "its last beat says it ended")
    last_sign = max(record_info.updated, beat_info.updated if beat_info else 0.0)
    holder = liveness.HolderView(
        lease=number,
        lease_record=None,
        beat=None,
        beat_info=beat_info,
        last_sign=last_sign,
        lease_info=record_info,
    )
    age, problem = liveness.sign_age(holder, storage.server_time())
    state, _ = liveness.judge(
        done=False,
        lease=None,
        beat=None,
        age=age,
        dead_after=promise,
        stall_after=float("inf"),
    )
    shown = "never" if age is None else f"{age:.0f}s ago"
    detail = f"last sign of life {shown} (dead after {promise:.0f}s)"
    if problem:
        detail += f"; {problem}"
    return Verdict(number, DEAD if state == DEAD else ALIVE, detail)


def numbers(storage: Storage) -> list[int]:
    """The supervisor record numbers in the run directory."""
    found = []
    for info in storage.list(rundir.SUPERVISOR_DIR):
        number = rundir.parse_lease_name(info.path.rsplit("/", 1)[-1])
        if number is not None:
            found.append(number)
    return found


def read_relaunches(storage: Storage) -> list[dict[str, Any]]:
    """Every supervisor's relaunches in ``storage``, oldest first.

    Unreadable records are left out (a report is not worth failing); an
    outage is raised (a supervisor's limits must not be read from half).
    """
    found: list[dict[str, Any]] = []
    for info in storage.list(rundir.SUPERVISOR_DIR):
        if not info.path.endswith(".relaunches.json"):
            continue
        try:
            record = storage.read_json(info.path)
        except (FileNotFoundError, ValueError):
            continue
        listed = record.get("relaunches") if isinstance(record, dict) else None
        for relaunch in listed if isinstance(listed, list) else []:
            if isinstance(relaunch, dict) and isinstance(
                relaunch.get("at"), (int, float)
            ):
                found.append({**relaunch, "supervisor": record.get("supervisor")})
    return sorted(found, key=lambda r: r["at"])


def started(relaunch: dict[str, Any]) -> bool | None:
    """Whether a relaunch started a session: None while it is still running.

    Records written before ``started`` existed count a lease taken as a start.
    """
    if relaunch.get("outcome") in (None, "running"):
        return None
    return bool(relaunch.get("started", "lease" in relaunch))


def failures_in_a_row(relaunches: list[dict[str, Any]]) -> int:
    """The run's latest relaunches that started no session, in a row.

    A relaunch still running (its supervisor died during it, or it is this
    supervisor's own) is neither: it is skipped.
    """
    count = 0
    for relaunch in reversed(relaunches):
        verdict = started(relaunch)
        if verdict is None:
            continue
        if verdict:
            break
        count += 1
    return count


def judge_start(
    status: liveness.RunStatus,
    listing: RunListing,
    lease: int,
    *,
    held: float,
    started_after: float,
) -> tuple[str, bool] | None:
    """Whether the session of ``lease``, holding the run for ``held``
    seconds, has started (True), failed to (False), or shown neither yet
    (None), with what happened in one line.

    Started: it committed a checkpoint, ended the run COMPLETED or STOPPED,
    or held it ``started_after`` seconds. Failed: DEAD or FAILED before any
    of those (an out-of-memory at its first step).
    """
    own = [d.name.step for d in listing.committed if d.name.lease == lease]
    if own:
        return (
            f"lease {lease} took the run and committed its first checkpoint "
            f"(step {min(own)})",
            True,
        )
    if status.state in (liveness.COMPLETED, liveness.STOPPED):
        return f"lease {lease} took the run and it is {status.state}", True
    if status.state in (liveness.DEAD, liveness.FAILED):
        return (
            f"lease {lease} took the run and was {status.state} before its "
            f"first checkpoint: {status.detail}",
            False,
        )
    if held >= started_after:
        return f"lease {lease} took the run and beat for {started_after:.0f}s", True
    return None


class Beats:
    """A supervisor's beat, written on a thread of its own every ``seconds``.

    A beat that cannot be written is logged and tried again at the next:
    another supervisor judges the silence, as it would a session's.
    """

    def __init__(self, storage: Storage, number: int, seconds: float) -> None:
        self.storage, self.number, self.seconds = storage, number, seconds
        self.state = "watching"
        self._count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"supervisor-{number}-beats", daemon=True
        )

    def start(self) -> None:
        self._write()
        self._thread.start()

    def _write(self) -> None:
        self._count += 1
        try:
            self.storage.write_json(
                beat_path(self.number),
                {"beat": self._count, "state": self.state, "written_at": time.time()},
            )
        except StorageError as exc:
            log.warning("supervisor %d: beat not written: %s", self.number, brief(exc))

    def _loop(self) -> None:
        while not self._stop.wait(self.seconds):
            self._write()

    def close(self) -> None:
        """Stop beating and say ``closed``: no supervisor waits on this one."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.state = "closed"
        self._write()

"""Relaunch a dead run through the user's own launcher: ``colab-resume supervise``.

A supervisor watches a run directory from anywhere (a laptop, a small VM,
Cloud Shell). When the run is DEAD (its holder silent past the holder's own
threshold, or its process gone on this host) it runs the user's relaunch
command once, waits for the new session to prove it started, and watches
again. It never relaunches a run that is ALIVE or STALLED (a holder that
beats), STOPPED (a person or a SIGTERM stopped it), COMPLETED or FAILED
(an error in the user's code, which a relaunch would meet again): it ends
with the watch's exit status for those (:mod:`colab_resume.exit_status`).

A relaunch counts as started only once its session has committed its first
checkpoint, or has held the lease and beaten for :attr:`Limits.started_after`
seconds; a session that takes the lease and dies at once (out of memory at
its first step) is a failed start.

Bounds, so that a broken launcher cannot spin, are the run's, not one
process's: they are counted from every supervisor's relaunch records, so a
restarted supervisor inherits them. At most :attr:`Limits.per_day`
relaunches in any 24 hours, and after :attr:`Limits.failed_starts` failed
starts in a row it stops and says why, with the command's last output
(redacted). Between failed starts it waits longer each time.

A supervisor is a session of its own (:mod:`.supervisor_records`): it takes
a record ``supervisor/NNNNNNNN.json`` create-only, numbered like leases,
and beats. Before it relaunches, it judges every newer supervisor by the
session rules and yields only to one that is ALIVE; a DEAD, CLOSED or
UNREADABLE one is named and ignored. Should two relaunch in the same
instant all the same, their sessions meet the lease, which only one can
take: never two sessions training.

Storage faults in its loop (the status poll, the listing, a record write)
are waited out and retried; supervision ends only on the outcomes of
:data:`~colab_resume.exit_status.SUPERVISE_EXIT`, ``GAVE_UP``,
``SUPERSEDED``, or a signal (Ctrl-C, SIGTERM), which closes its record.

The command is split like a shell would (``shlex``) and never run through
one; it gets ``COLAB_RESUME_RUN_DIR``, ``COLAB_RESUME_RELAUNCH`` (1, 2, ...
counted over the run) and ``COLAB_RESUME_AFTER_LEASE`` in its environment,
and runs in its own process group, whose output goes to a log file in a
temporary directory (its path is said; removed at the end unless a
relaunch failed). Neither the records nor the console show the command:
only its program's name and a hash. A command still running when the run
is DEAD again (a session hung) is stopped, process group and all, before
the next relaunch; one that ended the run is let finish. Stopping the
supervisor leaves a running session alone: it is the run's, not the
supervisor's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from colab_resume import exit_status
from colab_resume.errors import StorageError
from colab_resume.heartbeat import liveness
from colab_resume.heartbeat.liveness import RunStatus
from colab_resume.launch import supervisor_records as records
from colab_resume.launch.supervisor_records import read_relaunches
from colab_resume.protocol import rundir
from colab_resume.protocol.listing import RunListing
from colab_resume.redact import redact
from colab_resume.storage import Storage
from colab_resume.storage.faults import brief

__all__ = ["GAVE_UP", "SUPERSEDED", "Limits", "Supervisor", "read_relaunches"]

EXIT_CODES = exit_status.SUPERVISE_EXIT  # the one home: colab_resume.exit_status
GAVE_UP = exit_status.GAVE_UP
SUPERSEDED = exit_status.SUPERSEDED
# Lines of a failed relaunch's output shown.
OUTPUT_LINES = 20
# A supervisor beats at most this far apart, whatever its poll interval.
MAX_BEAT_SECONDS = 10.0
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Limits:
    """How a supervisor paces and bounds its relaunches.

    Attributes:
        per_day: relaunches of the run allowed in any 24 hours.
        failed_starts: relaunches of the run in a row that may start no session.
        start_seconds: how long a relaunch has to take the lease.
        interval: seconds between polls of the run; a failed start waits
            ``interval * 2**(failures in a row)`` before the next.
        started_after: seconds a new session must hold the lease, beating,
            to count as started when it has committed no checkpoint yet.
    """

    per_day: int = 24
    failed_starts: int = 3
    start_seconds: float = 900.0
    interval: float = 10.0
    started_after: float = 300.0

    def __post_init__(self) -> None:
        for name in ("per_day", "failed_starts"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"{name} must be at least 1, got {getattr(self, name)!r}"
                )
        for name in ("start_seconds", "interval", "started_after"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"{name} must be > 0 seconds, got {getattr(self, name)!r}"
                )

    @property
    def beat_seconds(self) -> float:
        return min(self.interval, MAX_BEAT_SECONDS)


class Superseded(Exception):
    """A newer supervisor that is alive took the run over."""


class Supervisor:
    """See the module docstring.

    Args:
        storage: the run directory.
        command: the relaunch command, as a shell would split it.
        limits: pacing and bounds.
        dead_after_seconds: overrides the holder's own threshold.
        say: where progress lines go.
        sleep: how the loop waits (tests may pass their own).
    """

    def __init__(
        self,
        storage: Storage,
        command: str,
        *,
        limits: Limits = Limits(),
        dead_after_seconds: float | None = None,
        say: Callable[[str], None] = print,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise ValueError("the relaunch command is empty")
        self.storage = storage
        self.limits = limits
        self.dead_after_seconds = dead_after_seconds
        self.say = say
        self.sleep = sleep
        self.number = 0
        self.shown = records.describe_command(self.argv)
        self.relaunches: list[dict[str, Any]] = []
        self._beats: records.Beats | None = None
        self._seen: dict[int, str] = {}
        self._child: subprocess.Popen[bytes] | None = None
        self._logs = tempfile.mkdtemp(prefix="colab-resume-supervise-")

    # --- the loop ------------------------------------------------------------------

    def run(self) -> int:
        """Watch and relaunch until the run ends or a limit is reached."""
        try:
            self.number = self._patiently("taking a record", self._take_record)
            self._beats = records.Beats(
                self.storage, self.number, self.limits.beat_seconds
            )
            self._beats.start()
            self.say(f"supervisor {self.number} of {self.storage.url}")
            while True:
                status = self._status()
                if status is not None and status.state in EXIT_CODES:
                    self.say(f"the run is {status.state}: {status.detail}")
                    self._let_child_finish()
                    return EXIT_CODES[status.state]
                if status is None or status.state != liveness.DEAD:
                    self.sleep(self.limits.interval)
                    continue
                self._patiently("judging newer supervisors", self._check_superseded)
                run_relaunches = self._patiently(
                    "reading the relaunch records",
                    lambda: read_relaunches(self.storage),
                )
                why = self._over_limit(run_relaunches)
                if why:
                    self.say(f"not relaunching: {why}")
                    return GAVE_UP
                if self._relaunch(status, len(run_relaunches) + 1):
                    continue
                failures = records.failures_in_a_row(
                    self._patiently(
                        "reading the relaunch records",
                        lambda: read_relaunches(self.storage),
                    )
                )
                if failures < self.limits.failed_starts:
                    self.sleep(self.limits.interval * 2**failures)
        except Superseded as exc:
            self.say(str(exc))
            return SUPERSEDED
        finally:
            if self._beats is not None:
                self._beats.close()
            # Kept where a relaunch failed: its output is the evidence.
            if all(r.get("started") for r in self.relaunches):
                shutil.rmtree(self._logs, ignore_errors=True)

    def _patiently(self, what: str, action: Callable[[], T]) -> T:
        """``action()``, retried after each storage fault, as the status poll is."""
        while True:
            try:
                return action()
            except StorageError as exc:
                self.say(f"storage fault {what}, retrying: {brief(exc)}")
                self.sleep(self.limits.interval)

    def _status(self, listing: list[RunListing] | None = None) -> RunStatus | None:
        try:
            read = RunListing.read(self.storage)
            if listing is not None:
                listing.append(read)
            return liveness.read_status(
                self.storage, dead_after_seconds=self.dead_after_seconds, listing=read
            )
        except StorageError as exc:  # an outage or a damaged record: may pass
            self.say(f"storage unreadable, retrying: {redact(str(exc))}")
            return None

    def _over_limit(self, run_relaunches: list[dict[str, Any]]) -> str | None:
        failures = records.failures_in_a_row(run_relaunches)
        if failures >= self.limits.failed_starts:
            last = self.relaunches[-1] if self.relaunches else run_relaunches[-1]
            return (
                f"the run's last {failures} relaunches in a row started no "
                f"session (a crash loop; failed_starts="
                f"{self.limits.failed_starts}). The last one: "
                f"{last.get('outcome', '?')}\n{last.get('output', '')}"
            )
        day_ago = time.time() - 86_400
        recent = [r for r in run_relaunches if r["at"] >= day_ago]
        if len(recent) >= self.limits.per_day:
            return (
                f"the run was relaunched {len(recent)} times in the last 24 "
                f"hours, by this and earlier supervisors "
                f"(per_day={self.limits.per_day})"
            )
        return None

    # --- one relaunch ---------------------------------------------------------------

    def _relaunch(self, status: RunStatus, count: int) -> bool:
        """Run the command; True once its session proved it started."""
        self._end_child()  # a session of ours that hangs dead goes first
        log_path = os.path.join(self._logs, f"relaunch-{count}.log")
        self.say(
            f"relaunch {count}: the run is DEAD at step {status.step} (lease "
            f"{status.lease}); running {self.shown} (output: {log_path})"
        )
        env = dict(
            os.environ,
            COLAB_RESUME_RUN_DIR=self.storage.url,
            COLAB_RESUME_RELAUNCH=str(count),
            COLAB_RESUME_AFTER_LEASE=str(status.lease),
        )
        record: dict[str, Any] = {
            "at": time.time(),
            "after_lease": status.lease,
            "step": status.step,
            "log": log_path,
            "outcome": "running",
        }
        self.relaunches.append(record)
        # Written before the command runs: a supervisor killed during the
        # relaunch leaves it counted against the run's limits.
        self._patiently("writing the relaunch record", self._write_relaunches)
        began = time.monotonic()
        try:
            with open(log_path, "wb") as log:
                self._child = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
        except OSError as exc:
            record.update(
                outcome=f"could not start: {exc.strerror}", output="", started=False
            )
            self._patiently("writing the relaunch record", self._write_relaunches)
            self.say(f"relaunch {count} failed: could not start ({exc.strerror})")
            return False
        outcome, lease, started = self._await_start(status.lease, began)
        record.update(
            outcome=outcome,
            seconds=round(time.monotonic() - began, 1),
            started=started,
        )
        if lease is not None:
            record["lease"] = lease
        if not started:
            self._end_child()
            record["output"] = _tail(log_path)
        self._patiently("writing the relaunch record", self._write_relaunches)
        self.say(f"relaunch {count}: {outcome}")
        if not started:
            self.say(record["output"])
        return started

    def _await_start(
        self, dead_lease: int, began: float
    ) -> tuple[str, int | None, bool]:
        """Poll until the new session proves it started or fails to.

        Returns:
            What happened, the lease that took the run (if any), and whether
            it counts as started.
        """
        poll = min(2.0, self.limits.interval)
        exited: int | None = None
        taken: int | None = None
        taken_at = 0.0
        while True:
            listed: list[RunListing] = []
            status = self._status(listed)
            if status is not None and status.lease > (taken or dead_lease):
                taken, taken_at = status.lease, time.monotonic()
                self.say(
                    f"lease {taken} took the run; it counts as started once it "
                    f"commits a checkpoint or beats for "
                    f"{self.limits.started_after:.0f}s"
                )
            if status is not None and taken is not None:
                verdict = records.judge_start(
                    status,
                    listed[0],
                    taken,
                    held=time.monotonic() - taken_at,
                    started_after=self.limits.started_after,
                )
                if verdict is not None:
                    return verdict[0], taken, verdict[1]
            child = self._child
            if taken is None and exited is None and child is not None:
                if child.poll() is not None:
                    exited = child.returncode
                    if exited != 0:
                        return (
                            f"the command exited with status {exited} before a "
                            f"session took the run",
                            None,
                            False,
                        )
            if taken is None and time.monotonic() - began >= self.limits.start_seconds:
                return (
                    f"no session took the run within {self.limits.start_seconds:.0f}s"
                    + (
                        f" (the command exited with {exited})"
                        if exited is not None
                        else ""
                    ),
                    None,
                    False,
                )
            self.sleep(poll)

    def _let_child_finish(self) -> None:
        """A session of ours that ended the run: let it close on its own
        (its last upload, its teardown), within the start bound."""
        child = self._child
        if child is not None:
            try:
                child.wait(timeout=self.limits.start_seconds)
            except subprocess.TimeoutExpired:
                self._end_child()

    def _end_child(self) -> None:
        """Stop the command's process group if it still runs (never two sessions)."""
        child, self._child = self._child, None
        if child is None or child.poll() is not None:
            return
        try:
            os.killpg(child.pid, signal.SIGTERM)
            child.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()

    # --- the records -----------------------------------------------------------------

    def _take_record(self) -> int:
        """The next supervisor number, taken create-only (a race: retry)."""
        record = {
            "supervisor_id": uuid.uuid4().hex[:12],
            "host": socket.gethostname(),
            "pid": os.getpid(),
            **records.command_facts(self.argv),
            "started": time.time(),
            "limits": dataclasses.asdict(self.limits),
            "beat_seconds": self.limits.beat_seconds,
            "dead_after_seconds": records.dead_after(self.limits.beat_seconds),
        }
        for _ in range(20):
            number = max(records.numbers(self.storage), default=0) + 1
            try:
                self.storage.write_json(
                    rundir.supervisor_path(number), record, create_only=True
                )
                return number
            except FileExistsError:
                continue
        raise StorageError("could not take a supervisor record: 20 races lost")

    def _check_superseded(self) -> None:
        """Yield to a newer supervisor that is alive; name every other one once."""
        for number in sorted(
            n for n in records.numbers(self.storage) if n > self.number
        ):
            verdict = records.judge_supervisor(self.storage, number)
            if verdict.state == records.ALIVE:
                raise Superseded(
                    f"supervisor {number} took this run over ({verdict.detail}); "
                    f"supervisor {self.number} ends without relaunching"
                )
            if self._seen.get(number) != verdict.state:
                self._seen[number] = verdict.state
                self.say(
                    f"supervisor {number} is {verdict.state} ({verdict.detail}): "
                    f"ignored, supervisor {self.number} goes on"
                )

    def _write_relaunches(self) -> None:
        shown = [{k: v for k, v in r.items() if k != "output"} for r in self.relaunches]
        self.storage.write_json(
            rundir.relaunches_path(self.number),
            {"supervisor": self.number, "relaunches": shown},
        )


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            lines = f.read()[-16_384:].decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return redact("\n".join(lines[-OUTPUT_LINES:]))


def supervise(
    run_dir: str,
    relaunch: str,
    *,
    storage_options: dict[str, Any] | None = None,
    limits: Limits = Limits(),
    dead_after_seconds: float | None = None,
) -> int:
    """``colab-resume supervise`` from Python: returns its exit status."""
    storage = Storage(run_dir, storage_options or {})
    storage.require_run_dir()
    return Supervisor(
        storage, relaunch, limits=limits, dead_after_seconds=dead_after_seconds
    ).run()

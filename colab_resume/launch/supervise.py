"""Relaunch a dead run through the user's own launcher: ``colab-resume supervise``.

A supervisor watches a run directory from anywhere (a laptop, a small VM,
Cloud Shell). When the run is DEAD (its holder silent past the holder's own
threshold, or its process gone on this host) it runs the user's relaunch
command once, waits for a new session to take the lease, and watches again.
It never relaunches a run that is ALIVE or STALLED (a holder that beats),
STOPPED (a person or a SIGTERM stopped it), COMPLETED or FAILED (an error
in the user's code, which a relaunch would meet again): it ends with the
watch's exit status for those.

Bounds, so that a broken launcher cannot spin: at most
:attr:`Limits.per_day` relaunches in any 24 hours, and after
:attr:`Limits.failed_starts` relaunches in a row that started no session
(the command failed, hung, or its session never took the lease) it stops
and says why, with the command's last output (redacted). Between failed
starts it waits longer each time.

One supervisor per run: each takes a record ``supervisor/NNNNNNNN.json``
create-only, numbered like leases, and a supervisor that sees a higher
record than its own is superseded and ends before it relaunches anything.
Should two relaunch in the same instant all the same, their sessions meet
the lease, which only one can take: never two sessions training.

Every relaunch is written to ``supervisor/NNNNNNNN.relaunches.json`` (when,
after which lease, how the command ended, which lease took the run and how
long after), which the run report reads.

The command is split like a shell would (``shlex``) and never run through
one; it gets ``COLAB_RESUME_RUN_DIR``, ``COLAB_RESUME_RELAUNCH`` (1, 2, ...)
and ``COLAB_RESUME_AFTER_LEASE`` in its environment, and runs in its own
process group, whose output goes to a log file in a temporary directory
(its path is said; removed at the end unless a relaunch failed). A
command still running when the run is DEAD again (a session hung) is
stopped, process group and all, before the next relaunch; one that ended
the run is let finish. Stopping the supervisor
leaves a running session alone: it is the run's, not the supervisor's.
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
from typing import Any

from colab_resume.errors import StorageError
from colab_resume.heartbeat import liveness
from colab_resume.heartbeat.liveness import RunStatus
from colab_resume.protocol import rundir
from colab_resume.redact import redact
from colab_resume.storage import Storage

# Exit statuses of a supervisor (the watch's, and two of its own).
EXIT_CODES = {
    liveness.COMPLETED: 0,
    liveness.FAILED: 4,
    liveness.STOPPED: 5,
}
GAVE_UP = 8  # a limit was reached: see what it said
SUPERSEDED = 9  # another supervisor took the run over
# Lines of a failed relaunch's output shown.
OUTPUT_LINES = 20


@dataclasses.dataclass(frozen=True)
class Limits:
    """How a supervisor paces and bounds its relaunches.

    Attributes:
        per_day: relaunches allowed in any 24 hours.
        failed_starts: relaunches in a row that may start no session.
        start_seconds: how long a relaunch has to take the lease.
        interval: seconds between polls of the run; a failed start waits
            ``interval * 2**(failures in a row)`` before the next.
    """

    per_day: int = 24
    failed_starts: int = 3
    start_seconds: float = 900.0
    interval: float = 10.0

    def __post_init__(self) -> None:
        if self.per_day < 1 or self.failed_starts < 1:
            raise ValueError("per_day and failed_starts must be at least 1")
        if not (self.start_seconds > 0 and self.interval > 0):
            raise ValueError("start_seconds and interval must be > 0 seconds")


class Superseded(Exception):
    """A supervisor with a higher record took the run over."""


class Supervisor:
    """See the module docstring.

    Args:
        storage: the run directory.
        command: the relaunch command, as a shell would split it.
        limits: pacing and bounds.
        dead_after_seconds: overrides the holder's own threshold.
        say: where progress lines go.
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
        self.relaunches: list[dict[str, Any]] = []
        self._child: subprocess.Popen[bytes] | None = None
        self._logs = tempfile.mkdtemp(prefix="colab-resume-supervise-")

    # --- the loop ------------------------------------------------------------------

    def run(self) -> int:
        """Watch and relaunch until the run ends or a limit is reached."""
        try:
            self.number = self._take_record()
            self.say(f"supervisor {self.number} of {self.storage.url}")
            failures = 0
            while True:
                status = self._status()
                if status is not None and status.state in EXIT_CODES:
                    self.say(f"the run is {status.state}: {status.detail}")
                    self._let_child_finish()
                    return EXIT_CODES[status.state]
                if status is None or status.state != liveness.DEAD:
                    self.sleep(self.limits.interval)
                    continue
                self._check_not_superseded()
                why = self._over_limit(failures)
                if why:
                    self.say(f"not relaunching: {why}")
                    return GAVE_UP
                if self._relaunch(status):
                    failures = 0
                    continue
                failures += 1
                if failures < self.limits.failed_starts:
                    self.sleep(self.limits.interval * 2**failures)
        except Superseded as exc:
            self.say(str(exc))
            return SUPERSEDED
        finally:
            # Kept where a relaunch failed: its output is the evidence.
            if all("lease" in r for r in self.relaunches):
                shutil.rmtree(self._logs, ignore_errors=True)

    def _status(self) -> RunStatus | None:
        try:
            return liveness.read_status(
                self.storage, dead_after_seconds=self.dead_after_seconds
            )
        except StorageError as exc:  # an outage or a damaged record: may pass
            self.say(f"storage unreadable, retrying: {redact(str(exc))}")
            return None

    def _over_limit(self, failures: int) -> str | None:
        if failures >= self.limits.failed_starts:
            last = self.relaunches[-1] if self.relaunches else {}
            return (
                f"{failures} relaunches in a row started no session (a crash "
                f"loop; failed_starts={self.limits.failed_starts}). The last "
                f"one: {last.get('outcome', '?')}\n{last.get('output', '')}"
            )
        day_ago = time.time() - 86_400
        recent = [r for r in self.relaunches if r["at"] >= day_ago]
        if len(recent) >= self.limits.per_day:
            return (
                f"{len(recent)} relaunches in the last 24 hours "
                f"(per_day={self.limits.per_day})"
            )
        return None

    # --- one relaunch ---------------------------------------------------------------

    def _relaunch(self, status: RunStatus) -> bool:
        """Run the command; True once a new session took the lease."""
        self._end_child()  # a session of ours that hangs dead goes first
        count = len(self.relaunches) + 1
        log_path = os.path.join(self._logs, f"relaunch-{count}.log")
        self.say(
            f"relaunch {count}: the run is DEAD at step {status.step} (lease "
            f"{status.lease}); running {redact(shlex.join(self.argv))} "
            f"(output: {log_path})"
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
        }
        self.relaunches.append(record)
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
            record.update(outcome=f"could not start: {exc}", output="")
            self._write_relaunches()
            self.say(f"relaunch {count} failed: could not start ({exc})")
            return False
        outcome = self._await_lease(status.lease, began)
        record.update(outcome=outcome, seconds=round(time.monotonic() - began, 1))
        taken = outcome.startswith("lease ")
        if taken:
            record["lease"] = int(outcome.split()[1])
        else:
            self._end_child()
            record["output"] = _tail(log_path)
        self._write_relaunches()
        self.say(f"relaunch {count}: {outcome}")
        if not taken:
            self.say(record["output"])
        return taken

    def _await_lease(self, dead_lease: int, began: float) -> str:
        """Poll until a lease above ``dead_lease`` appears, the command fails,
        or the start bound passes; says which."""
        poll = min(2.0, self.limits.interval)
        exited: int | None = None
        while time.monotonic() - began < self.limits.start_seconds:
            status = self._status()
            if status is not None and status.lease > dead_lease:
                return f"lease {status.lease} took the run"
            child = self._child
            if exited is None and child is not None and child.poll() is not None:
                exited = child.returncode
                if exited != 0:
                    return (
                        f"the command exited with status {exited} before a "
                        f"session took the run"
                    )
            self.sleep(poll)
        return f"no session took the run within {self.limits.start_seconds:.0f}s" + (
            f" (the command exited with {exited})" if exited is not None else ""
        )

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

    def _numbers(self) -> list[int]:
        found = []
        for info in self.storage.list(rundir.SUPERVISOR_DIR):
            name = info.path.rsplit("/", 1)[-1]
            number = rundir.parse_lease_name(name)
            if number is not None:
                found.append(number)
        return found

    def _take_record(self) -> int:
        """The next supervisor number, taken create-only (a race: retry)."""
        record = {
            "supervisor_id": uuid.uuid4().hex[:12],
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": redact(shlex.join(self.argv)),
            "started": time.time(),
            "limits": dataclasses.asdict(self.limits),
        }
        for _ in range(20):
            number = max(self._numbers(), default=0) + 1
            try:
                self.storage.write_json(
                    rundir.supervisor_path(number), record, create_only=True
                )
                return number
            except FileExistsError:
                continue
        raise StorageError("could not take a supervisor record: 20 races lost")

    def _check_not_superseded(self) -> None:
        newer = [n for n in self._numbers() if n > self.number]
        if newer:
            raise Superseded(
                f"supervisor {max(newer)} took this run over; supervisor "
                f"{self.number} ends without relaunching"
            )

    def _write_relaunches(self) -> None:
        shown = [{k: v for k, v in r.items() if k != "output"} for r in self.relaunches]
        self.storage.write_json(
            rundir.relaunches_path(self.number),
            {"supervisor": self.number, "relaunches": shown},
        )


def read_relaunches(storage: Storage) -> list[dict[str, Any]]:
    """Every supervisor's relaunches in ``storage``, oldest first."""
    found: list[dict[str, Any]] = []
    for info in storage.list(rundir.SUPERVISOR_DIR):
        if not info.path.endswith(".relaunches.json"):
            continue
        try:
            record = storage.read_json(info.path)
        except (StorageError, ValueError):  # unreadable: not worth a failed report
            continue
        listed = record.get("relaunches")
        for relaunch in listed if isinstance(listed, list) else []:
            if isinstance(relaunch, dict) and isinstance(
                relaunch.get("at"), (int, float)
            ):
                found.append({**relaunch, "supervisor": record.get("supervisor")})
    return sorted(found, key=lambda r: r["at"])


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

"""``colab-resume watch``: a live one-line view that exits when the run ends.

Exit codes: 0 COMPLETED, 3 DEAD, 4 FAILED, 5 STOPPED, 6 UNREADABLE (a
storage error that waiting does not cure: a damaged record, permission
denied). ``--on-dead CMD`` runs an alert command when the run is DEAD,
FAILED, STOPPED or UNREADABLE: it trains no more (a SIGTERM that stopped it
may be a preemption), or a watcher that cannot see the run cannot tell a
dead one from a live one, and retrying such an error for ever would keep a
dead run from alerting; ``COLAB_RESUME_STATE`` tells them apart. The command
is split like a shell would (``shlex``) but never run through a shell, and
the run's facts reach it only as environment variables
(``COLAB_RESUME_STATE``, ``COLAB_RESUME_STEP``...), so nothing read from the
run directory can inject shell syntax.

``--on-done CMD`` is the teardown for a COMPLETED run (deleting the TPU VM
that trained it), run the same way and never for any other state
(:mod:`colab_resume.launch.teardown`); ``--on-done-dry-run`` prints it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO

from colab_resume.cli import common
from colab_resume.errors import StorageError, StorageUnavailableError
from colab_resume.exit_status import WATCH_EXIT
from colab_resume.heartbeat import liveness
from colab_resume.heartbeat.liveness import RunStatus
from colab_resume.launch.teardown import Teardown, run_teardown
from colab_resume.storage import Storage

UNREADABLE = "UNREADABLE"  # watch's own verdict: the run directory cannot be read
EXIT_CODES = WATCH_EXIT  # the one home: colab_resume.exit_status
ALERT_STATES = (*liveness.FREE, UNREADABLE)
# One environment value; Linux refuses a single one over 128 KiB
# ("argument list too long"), and a heartbeat may carry any text.
MAX_ENV_VALUE_CHARS = 4_096
# C0 and C1 control characters, but not newline: printed raw, text from a
# run directory could move the cursor, retitle or clear the terminal.
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    watch = common.add_run_dir_command(
        commands,
        "watch",
        "Follow a run; exit 0 COMPLETED, 3 DEAD, 4 FAILED, 5 STOPPED, 6 UNREADABLE.",
    )
    watch.add_argument(
        "--interval", type=float, default=5.0, help="seconds between polls"
    )
    watch.add_argument(
        "--dead-after-seconds",
        "--dead-after",  # the older spelling
        dest="dead_after_seconds",
        type=float,
        help="override the holder's threshold",
    )
    watch.add_argument(
        "--on-dead",
        metavar="CMD",
        help="command run (without a shell) when the run is DEAD, FAILED or "
        "STOPPED or UNREADABLE; it gets COLAB_RESUME_STATE, COLAB_RESUME_STEP, ... "
        "in its "
        "environment",
    )
    watch.add_argument(
        "--on-done",
        metavar="CMD",
        help="teardown command (without a shell) run only when the run is "
        "COMPLETED, e.g. 'gcloud compute tpus tpu-vm delete NAME --zone=Z --quiet'",
    )
    watch.add_argument(
        "--on-done-dry-run",
        action="store_true",
        help="print the --on-done command instead of running it",
    )
    watch.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if not args.interval > 0:
        raise SystemExit("colab-resume watch: --interval must be > 0 seconds")
    return watch(
        common.open_run_dir(args),
        interval=args.interval,
        on_dead=args.on_dead,
        dead_after_seconds=args.dead_after_seconds,
        on_done=args.on_done,
        on_done_dry_run=args.on_done_dry_run,
    )


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``), safe for a terminal."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def one_line(status: RunStatus) -> str:
    def show(value: object) -> str:
        return "-" if value is None else str(value)

    age = "-" if status.heartbeat_age_s is None else f"{status.heartbeat_age_s:.0f}s"
    # The step is the furthest known; the beat's own, when behind it (a
    # checkpoint committed since), is said with the beat, never hidden.
    behind = status.beat_step is not None and status.beat_step != status.step
    at = f" at step {status.beat_step}" if behind else ""
    return printable(
        f"{status.state:<9} step {show(status.step)}"
        f"  ckpt {show(status.checkpoint_step)}"
        f"  beat {age} ago{at}  lease {status.lease}  {status.detail}"
    )


def host_lines(status: RunStatus) -> list[str]:
    """One line per process of a multi-process run: its liveness, host, step."""
    lines = []
    for beat in status.processes:
        age = "never" if beat.age_s is None else f"{beat.age_s:.0f}s ago"
        lines.append(
            f"  process {beat.process}: {beat.verdict.upper():<5} "
            f"host {beat.host or '-'}  step {'-' if beat.step is None else beat.step}"
            f"  {beat.state or '-'}  beat {age}"
            + (f"  ({beat.why})" if beat.why else "")
        )
    return lines


def alert_environment(status: RunStatus) -> dict[str, str]:
    """The run's facts as ``COLAB_RESUME_*`` variables for the alert command.

    Values come from the run directory: NUL (which no environment can
    hold) is dropped and each value cut to :data:`MAX_ENV_VALUE_CHARS`, so
    the alert runs whatever a heartbeat says.
    """
    env = dict(os.environ)
    for key, value in status.to_json().items():
        if key == "processes":  # e.g. "0:alive 1:dead", not a list of dicts
            value = " ".join(f"{b.process}:{b.verdict}" for b in status.processes)
        text = "" if value is None else str(value).replace("\0", "")
        env[f"COLAB_RESUME_{key.upper()}"] = text[:MAX_ENV_VALUE_CHARS]
    return env


def run_alert(command: str, status: RunStatus) -> int:
    """Run the user's alert command without a shell; returns its exit code."""
    argv = shlex.split(command)
    if not argv:
        return 0
    try:
        return subprocess.run(
            argv, env=alert_environment(status), check=False
        ).returncode
    except OSError as exc:
        print(
            f"colab-resume: could not run --on-dead command {argv[0]!r}: {exc}",
            file=sys.stderr,
        )
        return 127


def watch(
    storage: Storage,
    *,
    interval: float,
    on_dead: str | None,
    dead_after_seconds: float | None = None,
    on_done: str | None = None,
    on_done_dry_run: bool = False,
    out: IO[str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Poll the run until it is COMPLETED, DEAD, FAILED or STOPPED; returns the
    exit code (:data:`EXIT_CODES`)."""
    # Looked up now, not at import: a redirected stdout may have closed since.
    out = out if out is not None else sys.stdout
    live = out.isatty()
    last_printed = ""
    while True:
        try:
            status = liveness.read_status(
                storage, dead_after_seconds=dead_after_seconds
            )
        except StorageUnavailableError as exc:  # an outage: it may pass
            print(f"\nstorage unreachable, retrying: {exc}", file=sys.stderr)
            sleep(interval)
            continue
        except StorageError as exc:
            status = RunStatus(
                state=UNREADABLE,
                detail=f"cannot read the run directory: {exc}",
                run_dir=storage.url,
            )
        line = one_line(status)
        if live:
            out.write("\r\033[K" + line)
            out.flush()
        elif status.state != last_printed:  # logs get a line per state change
            print(line, file=out, flush=True)
            last_printed = status.state
        if status.state in EXIT_CODES:
            if live:
                out.write("\n")
            if on_dead and status.state in ALERT_STATES:
                run_alert(on_dead, status)
            if on_done:
                run_teardown(
                    Teardown(on_done, dry_run=on_done_dry_run),
                    status.state,
                    {"run_dir": status.run_dir, "step": status.step},
                    say=lambda text: print(printable(text), file=out, flush=True),
                )
            return EXIT_CODES[status.state]
        sleep(interval)

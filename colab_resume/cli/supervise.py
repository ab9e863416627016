"""``colab-resume supervise``: relaunch a dead run through your own launcher.

Exit codes (:mod:`colab_resume.exit_status`): 0 COMPLETED, 4 FAILED, 5
STOPPED (never relaunched), 8 a limit was reached (a crash loop, the
relaunches allowed a day), 9 a newer live supervisor took the run over;
Ctrl-C or SIGTERM end it with 130 after closing its record. See
:mod:`colab_resume.launch.supervise`.
"""

from __future__ import annotations

import argparse
import signal
from types import FrameType

from colab_resume.cli import common


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    supervise = common.add_run_dir_command(
        commands,
        "supervise",
        "Relaunch the run with --relaunch each time it is DEAD, until it is "
        "COMPLETED; exit 0 COMPLETED, 4 FAILED, 5 STOPPED, 8 gave up, 9 superseded.",
    )
    supervise.add_argument(
        "--relaunch",
        metavar="CMD",
        required=True,
        help="the command that starts a new session (split like a shell would, "
        "never run through one), e.g. 'python train.py' or 'gcloud colab "
        "executions create ...'",
    )
    supervise.add_argument(
        "--interval", type=float, default=10.0, help="seconds between polls"
    )
    supervise.add_argument(
        "--start-timeout",
        type=float,
        default=900.0,
        help="seconds a relaunch has to take the lease",
    )
    supervise.add_argument(
        "--max-per-day",
        type=int,
        default=24,
        help="relaunches of the run in any 24 hours (counted over every supervisor)",
    )
    supervise.add_argument(
        "--max-failed-starts",
        type=int,
        default=3,
        help="relaunches of the run in a row that start no session before giving up",
    )
    supervise.add_argument(
        "--started-after",
        type=float,
        default=300.0,
        help="seconds a relaunched session must hold the lease, beating, to "
        "count as started before it commits its first checkpoint",
    )
    supervise.add_argument(
        "--dead-after-seconds",
        type=float,
        help="override the holder's threshold",
    )
    supervise.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from colab_resume.launch.supervise import Limits, Supervisor

    try:
        limits = Limits(
            per_day=args.max_per_day,
            failed_starts=args.max_failed_starts,
            start_seconds=args.start_timeout,
            interval=args.interval,
            started_after=args.started_after,
        )
        supervisor = Supervisor(
            common.open_run_dir(args),
            args.relaunch,
            limits=limits,
            dead_after_seconds=args.dead_after_seconds,
            say=lambda line: print(line, flush=True),
        )
    except ValueError as exc:
        raise SystemExit(f"colab-resume supervise: {exc}") from None
    # SIGTERM ends it as Ctrl-C does: through its `finally`, which says
    # "closed" in its beat, so no newer supervisor waits for it to go silent.
    signal.signal(signal.SIGTERM, _interrupt)
    return supervisor.run()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt

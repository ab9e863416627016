"""``colab-resume status``: the run's verdict, its holder, a change of
runtime and its goodput."""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING

from colab_resume.cli import common

if TYPE_CHECKING:
    from colab_resume.heartbeat.liveness import RunStatus
    from colab_resume.protocol.listing import RunListing
    from colab_resume.report.goodput import Goodput
    from colab_resume.report.sessions import RunReport
    from colab_resume.storage import Storage

log = logging.getLogger(__name__)
# The history status reads: the newest chunks within this many bytes, so
# that its answer takes the same time whatever the history's size.
HISTORY_TAIL_BYTES = 4 << 20


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = common.add_run_dir_command(
        commands, "status", "Is the run alive, stalled, dead, stopped or finished?"
    )
    status.add_argument("--json", action="store_true", help="print RunStatus as JSON")
    status.add_argument(
        "--brief",
        action="store_true",
        help="the verdict only: skip the runtime and goodput lines (which read "
        "the history)",
    )
    status.add_argument(
        "--dead-after-seconds",
        "--dead-after",  # the older spelling
        dest="dead_after_seconds",
        type=float,
        help="override the holder's threshold",
    )
    status.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from colab_resume.cli.watch import host_lines, one_line, printable
    from colab_resume.heartbeat.liveness import read_status
    from colab_resume.protocol.listing import RunListing
    from colab_resume.report import runtime_change

    storage = common.open_run_dir(args)
    # One listing for the verdict and the goodput both.
    listing = RunListing.read(storage)
    status = read_status(
        storage, dead_after_seconds=args.dead_after_seconds, listing=listing
    )
    wanted = status.lease and not args.brief
    report = _tail(storage, listing, status) if wanted else None
    measured = _goodput(report) if report is not None else None
    changes = [s.runtime_changed for s in report.sessions] if report else []
    if args.json:
        found = status.to_json()
        found["goodput"] = measured.to_json() if measured is not None else None
        found["runtime_changed"] = runtime_change.to_json(changes)
        print(json.dumps(found, indent=1))
    else:
        print(f"{status.run_dir}\n  {one_line(status)}")
        if status.session_id:
            print(
                printable(
                    f"  holder: session {status.session_id} on {status.host}, "
                    f"accelerator {status.accelerator or '-'}, "
                    f"dead after {status.dead_after_s:.0f}s of silence"
                )
            )
        for line in host_lines(status):
            print(printable(line))
        changed = runtime_change.status_line(changes, status.lease)
        if changed is not None:
            print(printable(f"  {changed}"))
        if measured is not None:
            print(f"  {measured.one_line()}")
            if measured.chosen:
                print(printable(f"  {measured.chosen}"))
    return 0


def _tail(storage: Storage, listing: RunListing, status: RunStatus) -> RunReport | None:
    """The sessions of the history's newest chunks; None if unreadable."""
    from colab_resume.report.history import HistoryReader
    from colab_resume.report.sessions import read_report

    reader = HistoryReader(storage, newest_bytes=HISTORY_TAIL_BYTES)
    try:
        return read_report(storage, reader, listing=listing, holder=status)
    except Exception as exc:  # the verdict above matters more than the figures
        log.warning("history: not read: %s", exc)
        return None


def _goodput(report: RunReport) -> Goodput | None:
    """The run's goodput from ``report``; None if its records cannot say."""
    from colab_resume.report.goodput import measure

    try:
        return measure(report)
    except Exception as exc:  # the verdict above matters more than the figure
        log.warning("goodput: not computed: %s", exc)
        return None

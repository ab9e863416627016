"""``colab-resume status``: the run's verdict, its holder and its goodput."""

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
        help="the verdict only: skip the goodput line (which reads the history)",
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

    storage = common.open_run_dir(args)
    # One listing for the verdict and the goodput both.
    listing = RunListing.read(storage)
    status = read_status(
        storage, dead_after_seconds=args.dead_after_seconds, listing=listing
    )
    wanted = status.lease and not args.brief
    measured = _goodput(storage, listing, status) if wanted else None
    if args.json:
        found = status.to_json()
        found["goodput"] = measured.to_json() if measured is not None else None
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
        if measured is not None:
            print(f"  {measured.one_line()}")
            if measured.chosen:
                print(printable(f"  {measured.chosen}"))
    return 0


def _goodput(
    storage: Storage, listing: RunListing, status: RunStatus
) -> Goodput | None:
    """The run's goodput for ``status``; None if its records cannot say."""
    from colab_resume.report.goodput import read_goodput

    try:
        return read_goodput(
            storage, listing=listing, holder=status, history_bytes=HISTORY_TAIL_BYTES
        )
    except Exception as exc:  # the verdict above matters more than the figure
        log.warning("goodput: not computed: %s", exc)
        return None

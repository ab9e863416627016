"""``colab-resume report RUN_DIR -o report.png``: the run's picture.

Loss over steps with each session as its own band, deaths, redone gaps and
recoveries marked, checkpoints as ticks, and where the wall time went, session
by session (see :mod:`colab_resume.report.plot`); the goodput table is printed
(:mod:`colab_resume.report.goodput`).
Needs matplotlib (``pip install matplotlib``).
"""

from __future__ import annotations

import argparse

from colab_resume.cli import common
from colab_resume.report import goodput
from colab_resume.report.sessions import read_report
from colab_resume.storage import Storage


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = common.add_run_dir_command(
        commands, "report", "Draw loss over steps, one band per session."
    )
    report.add_argument(
        "-o", "--output", default="report.png", help="PNG file to write"
    )
    report.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    print(report(common.open_run_dir(args), args.output))
    return 0


def report(storage: Storage, output: str) -> str:
    """Draw the report of ``storage``'s run into ``output``; returns a summary."""
    from colab_resume.report.plot import render

    run = read_report(storage)
    measured = goodput.measure(run)
    png = render(run, title=storage.url, goodput=measured)
    with open(output, "wb") as file:
        file.write(png)
    lines = [
        f"wrote {output}: {len(run.history.points)} samples, "
        f"{len(run.sessions)} sessions, {len(run.deaths)} deaths, "
        f"at least {run.redone_steps} steps redone"
    ]
    lines += [f"  {session.describe()}" for session in run.sessions]
    lines += relaunch_lines(storage)
    lines += measured.table()
    lines += [f"warning: {problem}" for problem in run.problems]
    return "\n".join(lines)


def relaunch_lines(storage: Storage) -> list[str]:
    """What ``colab-resume supervise`` relaunched, one line each."""
    import time

    from colab_resume.cli.watch import printable
    from colab_resume.launch.supervise import read_relaunches

    lines = []
    for r in read_relaunches(storage):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["at"]))
        took = (
            f"lease {r['lease']} took the run {r.get('seconds', 0):.0f}s later"
            if "lease" in r and r.get("started", True) is True
            else str(r.get("outcome", "no session took the run"))
        )
        lines.append(
            printable(
                f"  relaunched by supervisor {r.get('supervisor')} at {when} UTC "
                f"after lease {r.get('after_lease')} died: {took}"
            )
        )
    return lines

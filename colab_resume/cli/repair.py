"""``colab-resume repair``: rebuild a Drive run directory's index."""

from __future__ import annotations

import argparse

from colab_resume.cli import common


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    repair = common.add_run_dir_command(
        commands,
        "repair",
        "Rebuild a Drive run directory's index from its files' proof "
        "(after it was trashed, deleted or damaged).",
    )
    repair.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from colab_resume.cli.watch import printable

    storage = common.open_run_dir(args)
    try:
        print(printable(storage.repair()))
    except FileNotFoundError as exc:
        raise SystemExit(f"colab-resume repair: {exc}") from None
    return 0

"""``colab-resume repair``: rebuild a Drive run directory's index."""

from __future__ import annotations

import argparse

from colab_resume import cli


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    repair = cli.add_run_dir_command(
        commands,
        "repair",
        "Rebuild a Drive run directory's index from its files' proof "
        "(after it was trashed, deleted or damaged).",
    )
    repair.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from colab_resume.cli.watch import printable

    storage = cli._open(args)
    try:
        print(printable(storage.repair()))
    except FileNotFoundError as exc:
        raise SystemExit(f"colab-resume repair: {exc}") from None
    return 0

"""``colab-resume``: inspect runs from anywhere, without TensorFlow.

colab-resume status RUN_DIR [--json] [--brief]
colab-resume watch RUN_DIR [--interval S] [--on-dead CMD] [--on-done CMD]
colab-resume ls RUN_DIR [--json]
colab-resume prune RUN_DIR --keep N
colab-resume report RUN_DIR -o report.png
colab-resume repair RUN_DIR
colab-resume verify RUN_DIR [--step N]
colab-resume supervise RUN_DIR --relaunch CMD
colab-resume selftest URL
colab-resume demo

Each command's module, named for the command (``cli/status.py`` is the
``status`` command, not the run's status, which is
:mod:`colab_resume.status`), registers it: ``register(commands)`` adds its
subparser, its arguments and its handler (``set_defaults(func=handle)``).
This module holds what they share: the run directory and storage options,
logging, the list of commands, and :func:`main`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from colab_resume._version import __version__
from colab_resume.errors import ColabResumeError

if TYPE_CHECKING:
    from colab_resume.storage import Storage


def add_run_dir_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
) -> argparse.ArgumentParser:
    """A command on a run directory: RUN_DIR and the storage options."""
    command = commands.add_parser(name, help=help_text, description=help_text)
    command.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="gs://bucket/path, gdrive://folder/path or a path",
    )
    command.add_argument(
        "--endpoint-url", help="GCS or Drive API endpoint (e.g. an emulator)"
    )
    command.add_argument(
        "--token",
        help="'anon' (GCS), a key file path, or a raw access token",
    )
    command.add_argument("--project", help="GCP project")
    return command


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    """The storage options given on the command line, for :class:`Storage`."""
    options: dict[str, Any] = {}
    if args.endpoint_url:
        options["endpoint_url"] = args.endpoint_url
    if args.token:
        options["token"] = args.token
    if args.project:
        options["project"] = args.project
    return options


def _open(args: argparse.Namespace) -> Storage:
    """The run directory named on the command line; it must exist.

    Commands call it as ``cli._open`` at each run, never binding it, so that
    tests can put a storage that counts its listings in its place.
    """
    from colab_resume.storage import Storage  # imported lazily for speed

    storage = Storage(args.run_dir, storage_options(args))
    storage.require_run_dir()
    return storage


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="colab-resume",
        description="Inspect colab_resume training runs from anywhere.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Imported here, not at the top: they import this module's helpers. What
    # only running a command needs (matplotlib for the report, the demo's
    # modules) each imports inside its handler, so parsing stays fast.
    from colab_resume.cli import (
        demo,
        ls,
        prune,
        repair,
        report,
        selftest,
        status,
        supervise,
        verify,
        watch,
    )

    # In the order --help lists them.
    commands_in_order = (status, watch, supervise, ls, prune, verify, report, repair)
    for command in (*commands_in_order, selftest, demo):
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.func(args)
        return code
    except ColabResumeError as exc:
        from colab_resume.cli.watch import printable
        from colab_resume.redact import redact

        # Messages quote the run directory's URL, which may carry a password
        # (sftp://user:pw@host/...), and terminals get logged and pasted.
        print(f"colab-resume: {printable(redact(str(exc)))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `colab-resume status ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

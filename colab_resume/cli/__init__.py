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
What they share (the run directory and its storage options) is
:mod:`colab_resume.cli.common`; this module holds logging, the list of
commands, and :func:`main`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from colab_resume._version import __version__
from colab_resume.errors import ColabResumeError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="colab-resume",
        description="Inspect colab_resume training runs from anywhere.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Imported here, not at the top, so that `import colab_resume.cli` stays
    # cheap. What only running a command needs (matplotlib for the report, the demo's
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

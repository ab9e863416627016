"""What the commands share: a run directory and its storage options.

Below every command's module and :mod:`colab_resume.cli` (which imports
the commands), so that no command imports the module that imports it.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

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


def open_run_dir(args: argparse.Namespace) -> Storage:
    """The run directory named on the command line; it must exist.

    Commands call it as ``common.open_run_dir`` at each run, never binding it, so that
    tests can put a storage that counts its listings in its place.
    """
    from colab_resume.storage import Storage  # imported lazily for speed

    storage = Storage(args.run_dir, storage_options(args))
    storage.require_run_dir()
    return storage

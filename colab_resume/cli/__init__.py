"""``colab-resume``: inspect runs from anywhere, without TensorFlow.

colab-resume status RUN_DIR [--json] [--brief]
colab-resume watch RUN_DIR [--interval S] [--on-dead CMD] [--on-done CMD]
colab-resume ls RUN_DIR [--json]
colab-resume prune RUN_DIR --keep N
colab-resume report RUN_DIR -o report.png
colab-resume repair RUN_DIR
colab-resume selftest URL
colab-resume demo
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from colab_resume._version import __version__
from colab_resume.errors import ColabResumeError

if TYPE_CHECKING:
    from colab_resume.heartbeat.liveness import RunStatus
    from colab_resume.protocol.listing import RunListing
    from colab_resume.report.goodput import Goodput
    from colab_resume.storage import Storage

log = logging.getLogger(__name__)


def _storage_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if args.endpoint_url:
        options["endpoint_url"] = args.endpoint_url
    if args.token:
        options["token"] = args.token
    if args.project:
        options["project"] = args.project
    return options


def _open(args: argparse.Namespace) -> Storage:  # imported lazily for speed
    from colab_resume.storage import Storage

    storage = Storage(args.run_dir, _storage_options(args))
    storage.require_run_dir()
    return storage


def cmd_status(args: argparse.Namespace) -> int:
    from colab_resume.cli.watch import host_lines, one_line, printable
    from colab_resume.heartbeat.liveness import read_status
    from colab_resume.protocol.listing import RunListing

    storage = _open(args)
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
        return read_goodput(storage, listing=listing, holder=status)
    except Exception as exc:  # the verdict above matters more than the figure
        log.warning("goodput: not computed: %s", exc)
        return None


def cmd_watch(args: argparse.Namespace) -> int:
    from colab_resume.cli.watch import watch

    if not args.interval > 0:
        raise SystemExit("colab-resume watch: --interval must be > 0 seconds")
    return watch(
        _open(args),
        interval=args.interval,
        on_dead=args.on_dead,
        dead_after_seconds=args.dead_after_seconds,
        on_done=args.on_done,
        on_done_dry_run=args.on_done_dry_run,
    )


def cmd_ls(args: argparse.Namespace) -> int:
    from colab_resume.cli.listing import collect, render
    from colab_resume.cli.watch import printable

    listing = collect(_open(args))
    print(json.dumps(listing, indent=1) if args.json else printable(render(listing)))
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from colab_resume.cli.prune import prune

    if args.keep < 1:
        raise SystemExit("colab-resume prune: --keep must be >= 1 (the newest stays)")
    deleted = prune(
        _open(args),
        keep=args.keep,
        keep_every_steps=args.keep_every_steps,
        dry_run=args.dry_run,
    )
    verb = "would delete" if args.dry_run else "deleted"
    for path in deleted:
        print(f"{verb} {path}")
    noun = "directory" if len(deleted) == 1 else "directories"
    print(f"{verb} {len(deleted)} checkpoint {noun}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from colab_resume.cli.report import report

    print(report(_open(args), args.output))
    return 0


def cmd_repair(args: argparse.Namespace) -> int:
    from colab_resume.cli.watch import printable

    storage = _open(args)
    try:
        print(printable(storage.repair()))
    except FileNotFoundError as exc:
        raise SystemExit(f"colab-resume repair: {exc}") from None
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from colab_resume.cli.selftest import selftest
    from colab_resume.cli.watch import printable

    outcomes = selftest(
        args.run_dir, _storage_options(args), say=lambda line: print(printable(line))
    )
    failed = [o for o in outcomes if not o.held]
    print(
        f"{len(outcomes) - len(failed)} of {len(outcomes)} held"
        + (": colab_resume cannot rely on this storage" if failed else "")
    )
    return 1 if failed else 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.processes == 2:
        from colab_resume.demo_multihost import main as multihost_main

        return multihost_main(run_dir=args.run_dir)
    if args.processes != 1:
        raise SystemExit("colab-resume demo: --processes is 1 or 2")
    from colab_resume.demo import main as demo_main

    return demo_main(run_dir=args.run_dir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="colab-resume",
        description="Inspect colab_resume training runs from anywhere.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_run_dir(name: str, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.add_argument(
            "run_dir",
            metavar="RUN_DIR",
            help="gs://bucket/path, gdrive://folder/path or a path",
        )
        cmd.add_argument(
            "--endpoint-url", help="GCS or Drive API endpoint (e.g. an emulator)"
        )
        cmd.add_argument(
            "--token",
            help="'anon' (GCS), a key file path, or a raw access token",
        )
        cmd.add_argument("--project", help="GCP project")
        return cmd

    status = with_run_dir(
        "status", "Is the run alive, stalled, dead, stopped or finished?"
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
    status.set_defaults(func=cmd_status)

    watch = with_run_dir(
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
    watch.set_defaults(func=cmd_watch)

    ls = with_run_dir("ls", "List leases, heartbeats and checkpoints.")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_ls)

    prune = with_run_dir("prune", "Delete old checkpoints (never the newest).")
    prune.add_argument("--keep", type=int, required=True, help="newest to keep")
    prune.add_argument("--keep-every-steps", type=int, help="also keep multiples")
    prune.add_argument("--dry-run", action="store_true", help="only list")
    prune.set_defaults(func=cmd_prune)

    report = with_run_dir("report", "Draw loss over steps, one band per session.")
    report.add_argument(
        "-o", "--output", default="report.png", help="PNG file to write"
    )
    report.set_defaults(func=cmd_report)

    repair = with_run_dir(
        "repair",
        "Rebuild a Drive run directory's index from its files' proof "
        "(after it was trashed, deleted or damaged).",
    )
    repair.set_defaults(func=cmd_repair)

    selftest = with_run_dir(
        "selftest",
        "Check what a run directory relies on of this storage, in a scratch "
        "folder below URL that is removed after (about a minute).",
    )
    selftest.set_defaults(func=cmd_selftest)

    demo = sub.add_parser("demo", help="Train, die silently, detect it, resume.")
    demo.add_argument(
        "--run-dir", help="where to put the demo run (default: a temp dir)"
    )
    demo.add_argument(
        "--processes",
        type=int,
        default=1,
        help="2: one run on two JAX processes loses one and resumes (needs jax)",
    )
    demo.set_defaults(func=cmd_demo)
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

"""``colab-resume verify``: read everything a checkpoint needs and check it.

    colab-resume verify RUN_DIR [--step N]

Checks the newest committed checkpoint (the one a restore takes first), or
the committed one of step ``N`` (of the highest lease, as a restore picks):
its manifest, every file and every shared object it references,
downloaded and checked against their size and CRC32C, and every tensor
(:mod:`colab_resume.checkpoint.verify`). Prints one line per check, then
the verdict. Exit status, for scripts:

- 0: the checkpoint is intact;
- 1: it is damaged (the lines say what);
- 3: there is no committed checkpoint to verify (of that step).

No framework is imported; the files go to a temporary local directory,
one at a time.
"""

from __future__ import annotations

import argparse

from colab_resume.cli import common

INTACT = 0
DAMAGED = 1
NOTHING = 3


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verify = common.add_run_dir_command(
        commands,
        "verify",
        "Download a committed checkpoint, shared objects included, and check "
        "every checksum and tensor (exit 0 intact, 1 damaged, 3 none).",
    )
    verify.add_argument(
        "--step", type=int, help="the checkpoint of this step (default: the newest)"
    )
    verify.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from colab_resume.checkpoint.verify import verify
    from colab_resume.cli.watch import printable
    from colab_resume.protocol.listing import RunListing

    storage = common.open_run_dir(args)
    committed = RunListing.read(storage).committed
    if args.step is not None:
        committed = tuple(d for d in committed if d.name.step == args.step)
    if not committed:
        which = "" if args.step is None else f" of step {args.step}"
        print(f"no committed checkpoint{which} in {printable(storage.url)}")
        return NOTHING
    verdict = verify(storage, committed[-1])
    print(verdict.checkpoint)
    for finding in verdict.findings:
        mark = "ok     " if finding.ok else "DAMAGED"
        print(f"  {mark} {finding.what}: {printable(finding.detail)}")
    if verdict.ok:
        print(f"intact: {verdict.checkpoint}")
        return INTACT
    print(f"damaged: {verdict.checkpoint} cannot be restored as it is")
    return DAMAGED

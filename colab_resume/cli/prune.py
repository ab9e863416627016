"""``colab-resume prune``: apply retention from anywhere, safely beside a live run.

The same rules as the agent's own retention (``checkpoint/retention.py``):
the newest committed checkpoint is never deleted, manifests go first. While
a session holds the run, its uncommitted directories may be uploads in
flight, so only older sessions' leftovers are cleaned. Shared objects
(``objects/``) no kept checkpoint references are deleted after the
checkpoints, and only while no session holds the run: an object the holder
uploaded for a checkpoint not yet committed is unreferenced too
(``checkpoint/objects.py``).
"""

from __future__ import annotations

import argparse
import dataclasses

from colab_resume.checkpoint import objects, retention
from colab_resume.cli import common
from colab_resume.heartbeat import liveness
from colab_resume.protocol.listing import RunListing
from colab_resume.storage import Storage


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    prune = common.add_run_dir_command(
        commands, "prune", "Delete old checkpoints (never the newest)."
    )
    prune.add_argument("--keep", type=int, required=True, help="newest to keep")
    prune.add_argument("--keep-every-steps", type=int, help="also keep multiples")
    prune.add_argument("--dry-run", action="store_true", help="only list")
    prune.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.keep < 1:
        raise SystemExit("colab-resume prune: --keep must be >= 1 (the newest stays)")
    deleted = prune(
        common.open_run_dir(args),
        keep=args.keep,
        keep_every_steps=args.keep_every_steps,
        dry_run=args.dry_run,
    )
    verb = "would delete" if args.dry_run else "deleted"
    checkpoints = [p for p in deleted if not p.startswith(objects.OBJECT_DIR + "/")]
    for path in deleted:
        print(f"{verb} {path}")
    noun = "directory" if len(checkpoints) == 1 else "directories"
    print(f"{verb} {len(checkpoints)} checkpoint {noun}")
    shared = len(deleted) - len(checkpoints)
    if shared:
        print(f"{verb} {shared} shared object(s) no kept checkpoint references")
    return 0


def prune(
    storage: Storage, *, keep: int, keep_every_steps: int | None, dry_run: bool
) -> list[str]:
    """Delete what retention allows; returns the checkpoint directories and
    then the shared objects (to be) deleted, as run paths."""
    # The verdict and the plan judge one snapshot, listed once.
    listing = RunListing.read(storage)
    status = liveness.read_status(storage, listing=listing)
    holder_may_upload = status.state in (liveness.ALIVE, liveness.STALLED)
    doomed = retention.plan(
        retention.with_leftovers(storage, listing.checkpoints),
        keep=keep,
        keep_every_steps=keep_every_steps,
        lease=status.lease - 1 if holder_may_upload else status.lease,
    )
    if not dry_run:
        for entry in doomed:
            # Not a lease holder, so nothing to fence; the plan never touches
            # the newest committed checkpoint nor a live holder's uploads.
            retention.delete(storage, entry, fence=lambda: None)
    paths = [entry.name.path for entry in doomed]
    if holder_may_upload:
        return paths
    if dry_run:
        kept = {e.name for e in doomed}
        after = dataclasses.replace(
            listing,
            checkpoints=tuple(d for d in listing.checkpoints if d.name not in kept),
        )
        unused = objects.unreferenced(storage, after) or []
        return paths + [objects.object_path(name) for name in unused]
    removed, _ = objects.collect(storage)
    return paths + removed

"""A lease holder in its own process, for tests that kill it for real.

    PYTHONPATH=tests python tests/workers/holder.py RUN_DIR --endpoint URL
        [--heartbeat S] [--mode M]

Modes: ``train`` advances the step; ``stall`` beats without progress;
``race`` tries to take the run once and reports WON or LOST (for lease
races; ``--go FILE`` lines racers up: support.starting). Prints
``READY <lease>`` once it holds the run.

``--identity`` is what its lease says about its process: ``real`` (this
process, so a reader on this machine can prove it gone), ``other-boot``
(the same, but another boot id: a holder on another VM), ``none`` (no
identity: an older version, or a holder without ``/proc``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import uuid

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--endpoint")
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--dead-after", type=float, default=None)
    parser.add_argument("--stall-after", type=float, default=600.0)
    parser.add_argument("--mode", choices=["train", "stall", "race"], default="train")
    parser.add_argument("--takeover", action="store_true")
    parser.add_argument(
        "--identity", choices=["real", "other-boot", "none"], default="real"
    )
    parser.add_argument(
        "--go", default=None, help="wait for this go file (lines up racers)"
    )
    args = parser.parse_args()

    from colab_resume.errors import LeaseRaceError, RunInUseError
    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.heartbeat.process import ProcessIdentity, this_process
    from colab_resume.storage import Storage

    def identity() -> ProcessIdentity | None:
        real = this_process()
        if args.identity == "none" or real is None:
            return None
        if args.identity == "other-boot":
            return dataclasses.replace(real, boot_id=str(uuid.uuid4()))
        return real

    from support.drive_emulator import emulator_options

    options = emulator_options(args.run_dir, args.endpoint) if args.endpoint else None
    storage = Storage(args.run_dir, options)
    session_options = SessionOptions(
        heartbeat_seconds=args.heartbeat,
        dead_after_seconds=args.dead_after,
        stall_after_seconds=args.stall_after,
        takeover=args.takeover,
    )
    storage.check()  # warm the connection so racers start together
    if args.go:
        from support.starting import wait_for_go

        wait_for_go(args.go)
    try:
        session = RunSession.open(storage, session_options, identity=identity)
    except (LeaseRaceError, RunInUseError) as exc:
        print(f"LOST {type(exc).__name__}: {exc}", flush=True)
        return 0
    # Racers that win keep holding (and beating) until the test kills them,
    # so a late racer meets a live holder rather than a released run.
    print(f"{'WON' if args.mode == 'race' else 'READY'} {session.lease}", flush=True)
    step = 0
    while True:
        if args.mode in ("train", "race"):
            step += 1
        session.update(state="training", step=step)
        try:
            session.check()
        except Exception as exc:
            print(f"FENCED {exc}", flush=True)
            return 5
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())

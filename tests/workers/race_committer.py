"""A session that races for a run and "commits" like the checkpoint manager.

    PYTHONPATH=tests python tests/workers/race_committer.py RUN_DIR --endpoint URL
        --go FILE --log FILE

Takes the run with ``takeover=True`` once the go file exists (so several
racers start together: support.starting), then commits marker objects the
way checkpoints are committed: ``session.fence()`` first, then a
create-only write, until a later session fences it (it holds the run
until then, so every holder is running when it is superseded). Prints
``WON <lease>`` or ``LOST``, ``COMMITTED`` after its first commit and
``FENCED`` when fenced. Every fence check and commit is appended to the
log as a JSON line with this machine's clock, for the test to check
against the leases' server times. No TensorFlow: the fencing path is what
is raced here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--go", required=True, help="the start line's go file")
    parser.add_argument("--log", required=True)
    args = parser.parse_args()

    from support.drive_emulator import emulator_options
    from support.starting import wait_for_go

    from colab_resume.errors import FencedError, LeaseRaceError
    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.storage import Storage

    storage = Storage(args.run_dir, emulator_options(args.run_dir, args.endpoint))
    storage.check()  # warm the connection so racers start together
    wait_for_go(args.go)
    log = open(args.log, "a", buffering=1)
    try:
        session = RunSession.open(
            storage, SessionOptions(heartbeat_seconds=0.3, takeover=True)
        )
    except LeaseRaceError:
        print("LOST", flush=True)
        return 0
    print(f"WON {session.lease}", flush=True)
    n = 0
    while True:
        n += 1
        checked = time.time()
        try:
            session.fence()
        except FencedError:
            log.write(json.dumps({"lease": session.lease, "fenced_at": checked}) + "\n")
            print("FENCED", flush=True)
            session.close("fenced")
            return 0
        path = f"commits/{session.lease:08d}-{n:05d}.json"
        storage.write_json(path, {"lease": session.lease}, create_only=True)
        log.write(
            json.dumps({"lease": session.lease, "checked": checked, "path": path})
            + "\n"
        )
        if n == 1:
            print("COMMITTED", flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())

"""A session that races for a run and "commits" like the checkpoint manager.

    python tests/workers/race_committer.py RUN_DIR --endpoint URL --start-at T
        --log FILE

Takes the run with ``takeover=True`` at wall-clock time ``T`` (so several
racers start together), then commits marker objects the way checkpoints
are committed: ``session.fence()`` first, then a create-only write. Every
fence check and commit is appended to ``FILE`` as a JSON line with this
machine's clock, for the test to check against the leases' server times.
No TensorFlow: the fencing path is what is raced here.
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
    parser.add_argument("--start-at", type=float, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()

    from colab_resume.errors import FencedError, LeaseRaceError
    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.storage import Storage

    storage = Storage(args.run_dir, {"token": "anon", "endpoint_url": args.endpoint})
    storage.check()
    time.sleep(max(0.0, args.start_at - time.time()))
    log = open(args.log, "a", buffering=1)
    try:
        session = RunSession.open(
            storage, SessionOptions(heartbeat_seconds=0.3, takeover=True)
        )
    except LeaseRaceError:
        print("LOST", flush=True)
        return 0
    print(f"WON {session.lease}", flush=True)
    end = time.monotonic() + args.seconds
    n = 0
    while time.monotonic() < end:
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
        time.sleep(0.05)
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

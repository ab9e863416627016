"""A writer that stops at the moment its last write would land, to be killed there.

    python tests/workers/killed_writer.py RUN_DIR [--endpoint URL --token T] REL...

Writes each ``REL`` (a few bytes, as a checkpoint file is written), the
last one up to its commit point only: on Drive its bytes are uploaded and
its name is about to be claimed in the run's index; on a local disk its
temporary file is written and about to be linked into place. There it
prints ``AT THE COMMIT POINT`` and waits, for the test to SIGKILL it: what
a kill during an upload leaves, at the one moment that matters, every time.
"""

from __future__ import annotations

import argparse
import os
import time


def wait_to_be_killed(*_: object, **__: object) -> None:
    print("AT THE COMMIT POINT", flush=True)
    time.sleep(600)
    raise SystemExit("not killed")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("rel", nargs="+")
    parser.add_argument("--endpoint")
    parser.add_argument("--token")
    args = parser.parse_args()

    from colab_resume.storage import Storage, drive_folder

    options = {}
    if args.endpoint:
        options = {"endpoint_url": args.endpoint, "token": args.token}
    storage = Storage(args.run_dir, options)
    *whole, last = args.rel
    for rel in whole:
        storage.write_bytes(rel, b"bytes of " + rel.encode())
    if args.run_dir.startswith("gdrive://"):
        drive_folder.RunFolder.update = wait_to_be_killed  # type: ignore[method-assign]
        storage.write_bytes(last, b"bytes of " + last.encode())
    else:
        os.link = wait_to_be_killed  # the local store's create-only link
        storage.write_bytes(last, b"bytes of " + last.encode(), create_only=True)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())

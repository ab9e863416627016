"""``colab-resume prune`` stopped right before one of its deletions, to be killed there.

    python tests/workers/killed_pruner.py RUN_DIR --keep N --hang-at K

Runs the CLI's prune (checkpoints, then the shared objects nobody
references). Its first K deletions go through; before deletion K it prints
``HANGING BEFORE <path>`` and waits for the test to SIGKILL it, so every
point between two deletions is killed at, every time, whatever the load.
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--keep", type=int, required=True)
    parser.add_argument("--hang-at", type=int, required=True)
    args = parser.parse_args()

    from colab_resume.cli.prune import prune
    from colab_resume.storage import Storage

    storage = Storage(args.run_dir)
    delete = storage.delete
    done = {"n": 0}

    def announced(rel: str) -> None:
        if done["n"] == args.hang_at:
            print(f"HANGING BEFORE {rel}", flush=True)
            time.sleep(600)
            raise SystemExit("not killed")
        delete(rel)
        done["n"] += 1

    storage.delete = announced  # type: ignore[method-assign]
    deleted = prune(storage, keep=args.keep, keep_every_steps=None, dry_run=False)
    print(f"PRUNED {len(deleted)} {done['n']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

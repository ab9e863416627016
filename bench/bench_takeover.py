"""How long a rerun waits for a SIGKILLed session, with the default beats.

Not a test: it prints a markdown table, both cases measured in one run on a
local run directory (the host decides here, not the storage).

    python bench/bench_takeover.py

Rows:
  same machine  a TensorFlow training process (tests/workers/agent_worker.py,
                10 s beats) SIGKILLed at step 15, then the same script rerun:
                seconds from the rerun's start to the lease taken, and from
                its connect to the lease (the takeover itself)
  new VM        a lease holder whose lease names another boot id, SIGKILLed
                right after a beat, then a new session with the defaults:
                the wait the heartbeat rule imposes (bound: dead after 40 s)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from support import worker  # noqa: E402

from colab_resume.heartbeat import RunSession, SessionOptions  # noqa: E402
from colab_resume.storage import Storage  # noqa: E402


def same_machine(base: str) -> tuple[float, float, str]:
    run, out = os.path.join(base, "run"), os.path.join(base, "w.npz")
    killed = worker(
        "agent_worker", run, out, "--kill-at-step", "15", "--heartbeat-seconds", "10"
    )
    killed.finish(expect_rc=-9)
    events = os.path.join(base, "events.json")
    started = time.monotonic()
    rerun = worker("agent_worker", run, out, "--events", events)
    rerun.expect("LEASE", timeout=600)
    to_lease = time.monotonic() - started
    rerun.finish()
    with open(events) as handle:
        seen = {e["kind"]: e for e in json.load(handle)}
    takeover = seen["lease.taken"]["time"] - seen["runtime.connected"]["time"]
    return to_lease, takeover, seen["lease.previous_dead"]["data"]["reason"]


def new_vm(base: str) -> tuple[float, int]:
    run = os.path.join(base, "run-elsewhere")
    holder = worker("holder", run, "--heartbeat", "10", "--identity", "other-boot")
    holder.expect("READY")  # its first beat is written
    holder.kill()
    started = time.monotonic()
    session = RunSession.open(Storage(run), SessionOptions())
    waited = time.monotonic() - started
    lines = len(session.events.recent(kind="lease.waiting"))
    session.close()
    return waited, lines


def main() -> int:
    base = tempfile.mkdtemp(prefix="bench-takeover-")
    to_lease, takeover, reason = same_machine(base)
    waited, lines = new_vm(base)
    print("| rerun after SIGKILL | waited for the old session | detail |")
    print("|---|---|---|")
    print(
        f"| same machine (TF worker) | none: lease taken {takeover:.2f} s after "
        f"connect, {to_lease:.1f} s after the rerun started (imports) | {reason} |"
    )
    print(
        f"| new VM (another boot id) | {waited:.1f} s (dead after 40 s) | "
        f"{lines} countdown lines in the log |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The chaos soak: many real SIGKILLs, takeover races and storage faults in one run.

    python tests/soak/soak.py [--kills 50] [--epochs 160] [--seed 1] [--out DIR]

(``make chaos``.) Starts the GCS emulator and a fault-injecting proxy in
front of it (5xx, resets, stalls, and 401s for expired tokens: workers
authenticate with short-lived fake tokens that the proxy enforces), then
trains ``tests/workers/agent_worker.py`` through the proxy and SIGKILLs it at
random instants — during start-up, restore, training and uploads — until
``--kills`` kills have landed. Every ``--race-every``-th life a second
worker starts with ``takeover=True`` while the first trains: the older one
must be fenced. Finally one worker trains to the end and its weights are
compared bitwise with an uninterrupted run on a local directory.

Figures are collected automatically and written to ``DIR/figures.json``
. *Data lost* counts committed steps that a
restarted session did not restore: before each life starts, the highest
committed checkpoint is read straight from the emulator; the life must
restore at least that step (one a life that died before restoring is not
counted). Not collected by pytest (no ``test_`` prefix); not in CI.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
# A script (`make chaos`), not under pytest: tests/ on the path for support.
sys.path.insert(0, TESTS)
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.pop("STORAGE_EMULATOR_HOST", None)

import numpy as np  # noqa: E402
from support.emulator import Emulator  # noqa: E402
from support.fake_credentials import token_check  # noqa: E402
from support.faultproxy import FaultMix, FaultProxy  # noqa: E402
from support.processes import python_path  # noqa: E402

from colab_resume.protocol.listing import RunListing  # noqa: E402
from colab_resume.storage import Storage  # noqa: E402

WORKER = os.path.join(TESTS, "workers", "agent_worker.py")
TOKEN_LIFETIME = 5.0  # seconds the proxy honours a token


class Life:
    """One worker process; its stdout is collected on a thread."""

    def __init__(self, argv: list[str]) -> None:
        self.popen = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": python_path()},
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self.started = time.monotonic()
        threading.Thread(target=self._pump, args=(self.popen.stdout, self.out)).start()
        threading.Thread(target=self._pump, args=(self.popen.stderr, self.err)).start()

    @staticmethod
    def _pump(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line.rstrip("\n"))

    def lease(self) -> int | None:
        """The lease this worker took, if it got that far."""
        for line in self.out:
            if line.startswith("LEASE "):
                return int(line.split()[1])
        return None

    def restored_step(self) -> int | None:
        """The step restored, 0 for a fresh start, None if it never got there."""
        for line in self.out:
            if line.startswith("EVENT checkpoint.restored"):
                return int(line.rsplit("=", 1)[1])
            if line.startswith("EVENT checkpoint.committed"):
                return 0  # committed before any restore: started from scratch
        return None


def worker_argv(run_dir: str, out: str, epochs: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        WORKER,
        run_dir,
        out,
        "--epochs",
        str(epochs),
        "--step-sleep",
        "0.05",
        "--retry-seconds",
        "60",
        *extra,
    ]


def highest_committed(storage: Storage, below_lease: int | None = None) -> int:
    """The newest committed step, optionally only among leases below one."""
    steps = [
        d.name.step
        for d in RunListing.read(storage).committed
        if (below_lease is None or d.name.lease < below_lease)
    ]
    return max(steps, default=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=160)
    parser.add_argument("--race-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out_dir = args.out or tempfile.mkdtemp(prefix="colab-resume-soak-")
    if os.path.exists(out_dir) and os.listdir(out_dir):
        # A completed reference run there would be restored, not retrained.
        print(f"soak: {out_dir} is not empty; give a new --out", file=sys.stderr)
        return 2
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(args.seed)
    started = time.monotonic()

    print(f"soak: reference run ({args.epochs} epochs, local directory)", flush=True)
    reference = os.path.join(out_dir, "reference.npz")
    subprocess.run(
        worker_argv(os.path.join(out_dir, "reference-run"), reference, args.epochs)[
            :-4
        ],  # no step sleep needed for the reference
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": python_path()},
    )

    emulator = Emulator()
    emulator.create_bucket("soak")
    proxy = FaultProxy(emulator.url)
    proxy.set_mix(
        FaultMix(
            error_rate=0.07,
            reset_rate=0.02,
            stall_rate=0.01,
            stall_seconds=1.0,
            statuses=(500, 503, 429),
            seed=args.seed,
        )
    )
    proxy.require_tokens(token_check(TOKEN_LIFETIME))
    run_dir = "gs://soak/runs/chaos"
    direct = Storage(run_dir, {"token": "anon", "endpoint_url": emulator.url})
    weights = os.path.join(out_dir, "weights.npz")
    faulted = ["--endpoint", proxy.url, "--expiring-token"]

    kills = races = fenced = lives = 0
    lost_steps = 0
    restored_from: list[int] = []
    try:
        while kills < args.kills:
            lives += 1
            before = highest_committed(direct)
            events = ["--events", os.path.join(out_dir, f"events-{lives}.json")]
            life = Life(worker_argv(run_dir, weights, args.epochs, *faulted, *events))
            rival = None
            if lives % args.race_every == 0:
                # A takeover race: a second session takes the run from a live one.
                _wait_for_training(life, timeout=60)
                rival = Life(
                    worker_argv(
                        run_dir, weights, args.epochs, *faulted, *events, "--takeover"
                    )
                )
                races += 1
                life.popen.wait(timeout=120)
                if life.popen.returncode != 0 and any(
                    "FencedError" in line for line in life.err
                ):
                    fenced += 1
                restored = life.restored_step()
                if restored is not None and restored < before:
                    lost_steps += before - restored
                # What the rival had to restore: everything committed before
                # it took its lease, not what it committed itself since.
                rival_lease = rival.lease()
                before = highest_committed(direct, below_lease=rival_lease)
                life = rival
            if rng.random() < 0.25:  # a kill during start-up or restore
                time.sleep(rng.uniform(1.0, 8.0))
            else:  # a kill while training and uploading
                _wait_for_training(life, timeout=120)
                time.sleep(rng.uniform(0.2, 5.0))
            if life.popen.poll() is None:
                life.popen.kill()
                kills += 1
            life.popen.wait()
            restored = life.restored_step()
            if restored is not None:
                restored_from.append(restored)
                if restored < before:
                    lost_steps += before - restored
                    print(f"soak: LOST restored {restored} < {before}", flush=True)
            if any(line.startswith("DONE") for line in life.out):
                print("soak: the run completed before all kills; stop", flush=True)
                break
            print(
                f"soak: life {lives} kills {kills} restored {restored} "
                f"committed {highest_committed(direct)} faults {proxy.faults()}",
                flush=True,
            )
        print("soak: final run to the end", flush=True)
        before = highest_committed(direct)
        final = subprocess.run(
            worker_argv(run_dir, weights, args.epochs, *faulted),
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": python_path()},
            timeout=1800,
        )
        if final.returncode != 0:
            print(final.stdout[-3000:], final.stderr[-5000:])
            return 1
        refreshes = [
            int(line.split()[1])
            for line in final.stdout.splitlines()
            if line.startswith("REFRESHES")
        ]
    finally:
        proxy.close()
        emulator.stop()

    a, b = np.load(reference), np.load(weights)
    different = [k for k in a.files if not np.array_equal(a[k], b[k])]
    counts = collections.Counter({k: v for k, v in proxy.counts.items() if v})
    figures = {
        "command": " ".join(["python", "tests/soak/soak.py", *sys.argv[1:]]),
        "kills_survived": kills,
        "lives": lives + 1,
        "takeover_races": races,
        "sessions_fenced": fenced,
        "requests": counts.get("requests", 0),
        "faults_injected": proxy.faults(),
        "faults_by_kind": {
            k: v for k, v in sorted(counts.items()) if k not in ("requests", "passed")
        },
        "token_refreshes_final_life": refreshes[0] if refreshes else None,
        "data_lost_steps": lost_steps,
        "final_weights_bitwise_equal": not different
        and sorted(a.files) == sorted(b.files),
        "wall_seconds": round(time.monotonic() - started),
    }
    with open(os.path.join(out_dir, "figures.json"), "w") as handle:
        json.dump(figures, handle, indent=1)
    print(json.dumps(figures, indent=1))
    ok = figures["final_weights_bitwise_equal"] and lost_steps == 0
    return 0 if ok else 1


def _wait_for_training(life: Life, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and life.popen.poll() is None:
        if any(line.startswith("EVENT checkpoint.") for line in life.out):
            return
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())

"""Report and status time against the history's size.

Plants a run directory on the local disk whose history is ``MB`` megabytes
of chunks as sessions write them (samples, events, a tally each), spread
over many sessions (one chunk, one lease record and one heartbeat each),
then times, each in the same process:

* ``report``: :func:`read_report` and the goodput (what ``colab-resume
  report`` does before it draws);
* ``status``: ``colab-resume status`` (the verdict and the goodput line,
  from a bounded tail of the history);
* ``auto start``: what a ``save_every="auto"`` session reads before its
  first step (:func:`evidence_before`).

Each version is timed in a fresh process; ``--against DIR`` times another
copy of the package (an earlier revision) on the same run directory, the
two alternating, best of ``--rounds``.

Run: ``python bench/bench_report.py [--sizes 1 4 16 64 100] [--against DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from colab_resume.cli import main as cli
from colab_resume.report import goodput as gp
from colab_resume.report.goodput import evidence_before
from colab_resume.report.history import chunk_path
from colab_resume.report.sessions import read_report
from colab_resume.storage import Storage

# `measure` came with the total arithmetic: the bench runs on the versions
# before it too, for the comparison in the guide.
measure = getattr(gp, "measure", gp.compute)
CHUNKS_PER_SESSION = 1
# Samples and events a chunk (``--per-chunk``): 60 makes a chunk of about
# 20 KB; 10 one of about 4 KB, and 5,000 sessions in 20 MB.
PER_CHUNK = 60


def chunk(lease: int, seq: int, now: float, step: int, per: int = PER_CHUNK) -> dict:
    """One history chunk as a session writes it, ``per`` samples and events."""
    points = [
        [step + i, now + i, {"loss": 1.0 / (1 + step + i), "accuracy": 0.5}]
        for i in range(per)
    ]
    events = [
        {
            "time": now + i,
            "kind": "checkpoint.committed" if i % 6 == 0 else "checkpoint.saved",
            "level": "info",
            "step": step + i,
            "message": f"step-{step + i:09d}-lease-{lease:08d} committed " + "x" * 120,
        }
        for i in range(per)
    ]
    if seq == 0:
        events[0] = {**events[0], "kind": "run.resumed_at", "message": "resumed"}
    return {
        "format": 1,
        "lease": lease,
        "seq": seq,
        "session_id": f"s{lease}",
        "written_at": now,
        "points": points,
        "events": events,
        "timings": {"steps": step + 60, "step_seconds": 0.01 * (step + 60),
                    "saves": 10 + seq, "save": 0.1 * (10 + seq), "first_saves": 1,
                    "connect": 2.0, "build": 1.0, "first_step": 0.5,
                    "first_steps": 1},
    }  # fmt: skip


def plant(run_dir: str, megabytes: float, per: int = PER_CHUNK) -> tuple[int, int]:
    """A history of about ``megabytes`` MB; returns (sessions, chunks)."""
    storage = Storage(run_dir)
    now = time.time() - 86_400
    storage.write_json(
        "run.json", {"run_id": "bench", "created_at": now, "package_version": "0"}
    )
    one = len(json.dumps(chunk(1, 0, now, 0, per)))
    chunks = max(1, int(megabytes * 1e6 / one))
    sessions = -(-chunks // CHUNKS_PER_SESSION)
    for lease in range(1, sessions + 1):
        storage.write_json(
            f"lease/{lease:08d}.json",
            {"lease": lease, "session_id": f"s{lease}", "host": "h", "pid": 1,
             "created_at": now, "package_version": "0", "heartbeat_seconds": 10.0,
             "dead_after_seconds": 60.0, "stall_after_seconds": 600.0},
        )  # fmt: skip
        storage.write_json(
            f"heartbeat/{lease:08d}.json",
            {"session_id": f"s{lease}", "host": "h", "lease": lease, "beat": 9,
             "state": "stopped" if lease % 3 else "training",
             "step": lease * 300, "progress_at": now, "since_progress_s": 0.0,
             "written_at": now},
        )  # fmt: skip
    for n in range(chunks):
        lease, seq = 1 + n // CHUNKS_PER_SESSION, n % CHUNKS_PER_SESSION
        path = os.path.join(run_dir, chunk_path(lease, seq))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as file:
            json.dump(chunk(lease, seq, now + n * 100, lease * 300, per), file)
    return sessions, chunks


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def status(run_dir: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli(["status", run_dir]) == 0
    assert "goodput" in out.getvalue(), out.getvalue()


def measure_here(run_dir: str, sessions: int) -> dict[str, float]:
    """The three times, in this process (the colab_resume it imports)."""
    storage = Storage(run_dir)
    return {
        "report": timed(lambda: measure(read_report(storage))),
        "status": timed(lambda: status(run_dir)),
        "auto": timed(lambda: evidence_before(storage, sessions + 1)),
    }


def measure_in(code: str | None, run_dir: str, sessions: int) -> dict[str, float]:
    """The three times in a fresh process importing colab_resume from
    ``code`` (a directory holding the package; None: this checkout's)."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = code
    done = subprocess.run(
        [sys.executable, __file__, "--measure", run_dir, str(sessions)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    times: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 4, 16, 64, 100])
    parser.add_argument(
        "--against",
        help="a directory holding another colab_resume package (e.g. from "
        "'git archive REV colab_resume | tar -x -C DIR'): timed side by side",
    )
    parser.add_argument("--rounds", type=int, default=1, help="best of N, each")
    parser.add_argument(
        "--per-chunk", type=int, default=PER_CHUNK, help="samples and events a chunk"
    )
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure_here(args.measure[0], int(args.measure[1]))))
        return
    versions = [None] + ([args.against] if args.against else [])
    names = ["this"] + (["against"] if args.against else [])
    columns = [f"{what} ({name})" for what in ("report", "status", "auto start")
               for name in names]  # fmt: skip
    print(f"| history | sessions | {' | '.join(columns)} |")
    print(f"|---:|---:|{'---:|' * len(columns)}")
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as run_dir:
            sessions, _ = plant(run_dir, size, args.per_chunk)
            best: list[dict[str, float]] = [{} for _ in versions]
            for _ in range(args.rounds):  # alternating: both see the same load
                for i, code in enumerate(versions):
                    times = measure_in(code, run_dir, sessions)
                    for key, value in times.items():
                        best[i][key] = min(best[i].get(key, value), value)
        cells = [f"{best[i][key]:.2f} s" for key in ("report", "status", "auto")
                 for i in range(len(versions))]  # fmt: skip
        print(f"| {size:g} MB | {sessions:,} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()

"""Training overhead and save blocking: plain Keras vs the agent vs TF async.

    python bench/head_to_head/overhead.py [--repeats 3] [--epochs 4]
        [--steps-per-epoch 20] [--save-every 10[,96...]] [--no-tf] [--profile]

The head-to-head workload (``workload.py``: a 2.1M-parameter MLP under a
2-replica MirroredStrategy on CPU), a save every 10 steps (or each of
``--save-every``'s cadences), uninterrupted, each run a fresh process:

- ``plain_fit``: Keras ``model.fit``, no checkpoints (the baseline);
- ``cr_gcs``: ``Agent.fit`` on the GCS emulator, 1 s heartbeats, once per
  cadence (``cr_gcs@96``);
- ``tfcm_async``: a hand-written loop saving with TensorFlow's own async
  checkpointing (``tf.train.CheckpointManager``, local disk; not with
  ``--no-tf``).

The CPU column is the process's CPU seconds (all threads: training,
TensorFlow's pools, uploads, heartbeats) over plain ``fit``'s; the storage
server's column is the CPU the emulator used during the run (on Linux),
which shares the cores with training here and would not on real GCS. With
``--profile``, one more run per cadence, not timed, profiles the agent's
training thread (cProfile) and prints where its time went.

Runs are interleaved (plain, agent, TF async, plain, ...), so noise from
other work on the machine hits all alike. Prints, per contender, the median
(min-max) of its whole-training time over plain ``fit``'s in the same
round; the same for the median time of one step (the steady pace, which
start-up, epoch ends and TensorFlow's occasional multi-second stall when it
makes or deletes an iterator do not touch); the seconds of a run spent in
those stalls (gaps between steps over 4x its median step), which with the
steady pace accounts for the whole run; and the median blocking time per
save (the wall time of the save call) — the median over runs of each run's
median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run as head_to_head  # noqa: E402
import scenarios  # noqa: E402

CONTENDERS = ("plain_fit", "cr_gcs", "tfcm_async")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--save-every", default="10")
    parser.add_argument("--no-tf", action="store_true", help="skip tfcm_async")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    cadences = [int(c) for c in args.save_every.split(",")]
    plans: dict[str, dict] = {"plain_fit": {"save_every": cadences[0]}}
    for cadence in cadences:
        name = "cr_gcs" if len(cadences) == 1 else f"cr_gcs@{cadence}"
        plans[name] = {"save_every": cadence}
    if not args.no_tf:
        plans["tfcm_async"] = {"save_every": cadences[0]}
    emulator = head_to_head._load_emulator()()
    emulator.create_bucket(scenarios.BUCKET)
    runs: dict[str, list[dict]] = {c: [] for c in plans}
    profiles: dict[str, dict] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="overhead-") as root:
            runner = scenarios.Runner(root, emulator.url)
            shape = {"epochs": args.epochs, "steps_per_epoch": args.steps_per_epoch}
            for round_ in range(args.repeats):
                for name, plan in plans.items():
                    print(f"[overhead] round {round_ + 1}: {name}", file=sys.stderr)
                    runs[name].append(
                        _timed(runner, name, {**shape, **plan}, emulator.process.pid)
                    )
            for name, plan in plans.items() if args.profile else ():
                if name.startswith("cr_gcs"):
                    out = os.path.join(root, f"profile-{len(profiles)}.json")
                    _timed(runner, name, {**shape, **plan, "profile": out})
                    with open(out) as handle:
                        profiles[name] = json.load(handle)
    finally:
        emulator.stop()
    print(report(runs, args))
    if profiles:
        print("\n" + profile_table(profiles))
    return 0


def _server_cpu(pid: int | None) -> float | None:
    """CPU seconds the storage server (the emulator's process) has used.

    It shares this machine's cores with training, which real GCS does not:
    its share of a run's cost is reported apart. None where ``/proc`` is not.
    """
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(
    runner: scenarios.Runner, name: str, plan: dict, server_pid: int | None = None
) -> dict:
    contender = name.split("@")[0]
    server_before = _server_cpu(server_pid)
    p = runner.run(contender, "clean", **plan)
    server_after = _server_cpu(server_pid)
    if not p.first("done"):
        raise SystemExit(f"{name} failed:\n{p.stderr}")
    blocks = sorted(e["block_s"] for e in p.all("save"))
    scenarios._delete(runner, contender, "clean")
    end = p.first("train_end")
    return {
        "train_s": end["seconds"],
        "cpu_s": end.get("cpu_s"),
        "block_s": statistics.median(blocks) if blocks else None,
        "step_s": _median_step(p.all("step")),
        "stall_s": _stalls(p.all("step")),
        "server_cpu_s": (
            server_after - server_before
            if server_before is not None and server_after is not None
            else None
        ),
    }


def profile_table(profiles: dict[str, dict]) -> str:
    """Seconds of the agent's training thread per part, per cadence."""
    names = list(profiles)
    lines = [
        "Training thread, cProfile (one untimed run each; cumulative seconds, "
        "nested parts overlap):",
        "",
        "| part | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    lines.append(
        "| whole training (profiled) | "
        + " | ".join(f"{profiles[n]['train_s']:.2f}" for n in names)
        + " |"
    )
    for part in profiles[names[0]]["parts"]:
        lines.append(
            f"| {part} | "
            + " | ".join(f"{profiles[n]['parts'][part]:.3f}" for n in names)
            + " |"
        )
    return "\n".join(lines)


def _gaps(steps: list[dict]) -> list[float]:
    """The time from each step's end to the next's."""
    times = [e["t"] for e in steps]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def _median_step(steps: list[dict]) -> float:
    """The median gap between steps: the steady pace, untouched by start-up,
    epoch ends and the rare stall."""
    return statistics.median(_gaps(steps))


def _stalls(steps: list[dict]) -> float:
    """Seconds in gaps between steps over 4x the run's median step: where the
    whole run goes beyond its steady pace (iterators made or deleted, an
    epoch's end, a wait for storage)."""
    gaps = _gaps(steps)
    median = statistics.median(gaps)
    return sum(gap for gap in gaps if gap > 4 * median)


def report(runs: dict[str, list[dict]], args: argparse.Namespace) -> str:
    base = [r["train_s"] for r in runs["plain_fit"]]
    base_step = [r["step_s"] for r in runs["plain_fit"]]
    base_cpu = [r["cpu_s"] for r in runs["plain_fit"]]
    steps = args.epochs * args.steps_per_epoch
    lines = [
        f"`python bench/head_to_head/overhead.py --repeats {args.repeats} "
        f"--epochs {args.epochs} --steps-per-epoch {args.steps_per_epoch} "
        f"--save-every {args.save_every}{' --no-tf' if args.no_tf else ''}` "
        f"({steps} steps; a save every N steps as named, plain fit none)",
        "",
        "| contender | training time, median | / plain fit, median (min-max) "
        "| step time / plain fit's, median (min-max) | CPU / plain fit's, median "
        "| stalls (gaps over 4x the median step), median (min-max) "
        "| blocking per save, median | storage server CPU, median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for contender, rows in runs.items():
        times = [r["train_s"] for r in rows]
        ratios = sorted(t / b for t, b in zip(times, base, strict=True))
        paces = sorted(r["step_s"] / b for r, b in zip(rows, base_step, strict=True))
        cpus = sorted(
            r["cpu_s"] / b
            for r, b in zip(rows, base_cpu, strict=True)
            if r["cpu_s"] and b
        )
        blocks = [r["block_s"] for r in rows if r["block_s"] is not None]
        block = f"{statistics.median(blocks) * 1e3:.1f} ms" if blocks else "-"
        cpu = f"{statistics.median(cpus):.3f}" if cpus else "-"
        served = [r["server_cpu_s"] for r in rows if r.get("server_cpu_s") is not None]
        server = f"{statistics.median(served):.2f} s" if served else "-"
        stalls = sorted(r["stall_s"] for r in rows)
        lines.append(
            f"| {contender} | {statistics.median(times):.2f} s "
            f"| **{statistics.median(ratios):.3f}** ({ratios[0]:.3f}-{ratios[-1]:.3f}) "
            f"| {statistics.median(paces):.3f} ({paces[0]:.3f}-{paces[-1]:.3f}) "
            f"| {cpu} | {statistics.median(stalls):.2f} s "
            f"({stalls[0]:.2f}-{stalls[-1]:.2f}) | {block} | {server} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""Training overhead and save blocking: plain Keras vs the agent vs TF async.

    python bench/head_to_head/overhead.py [--repeats 3] [--epochs 4]
        [--steps-per-epoch 20] [--save-every 10[,96...]] [--no-tf] [--profile]

The head-to-head workload (``workload.py``: a 2.1M-parameter MLP under a
2-replica MirroredStrategy on CPU), uninterrupted, each run a fresh
process, at each of ``--save-every``'s cadences (a save every N steps):

- ``plain_fit``: Keras ``model.fit``, no checkpoints (the baseline);
- ``plain_loop``: the hand-written loop TF's contender trains with, no
  checkpoints (its own baseline; not with ``--no-tf``);
- ``cr_local``: ``Agent.fit`` on a local run directory;
- ``tfcm_async``: the hand-written loop saving with TensorFlow's own async
  checkpointing (``tf.train.CheckpointManager``, local disk; not with
  ``--no-tf``);
- ``cr_gcs``: ``Agent.fit`` on the GCS emulator;

the agent with 1 s heartbeats. The CPU column is the process's CPU seconds
(all threads: training, TensorFlow's pools, uploads, heartbeats) over plain
``fit``'s. Beside each GCS contender, the CPU seconds the storage server
(the emulator's process, read from ``/proc``) used during the run, which
shares the cores with training here and would not on real GCS, and the
process's CPU with the server's. With ``--profile``, one more run per agent
contender, not timed, profiles the agent's training thread and upload
thread (cProfile) and prints where their time went.

Runs are interleaved (plain, loop, agent local, TF async, agent GCS, ...),
so noise from other work on the machine hits all alike. Prints, per
contender, the median (min-max) of its whole-training time over plain
``fit``'s in the same round; the same for the median time of one step (the
steady pace, which start-up, epoch ends and TensorFlow's occasional
multi-second stall when it makes or deletes an iterator do not touch); the
seconds of a run spent in those stalls (gaps between steps over 4x its
median step), which with the steady pace accounts for the whole run; and
the median blocking time per save (the wall time of the save call) — the
median over runs of each run's median. A second table pairs runs of the
same round that differ in one thing only: the agent's checkpointing over
plain ``fit``, TF's over its plain loop, the GCS emulator over local disk
for the agent, and the hand-written loop over ``fit``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run as head_to_head  # noqa: E402
import scenarios  # noqa: E402

CONTENDERS = ("plain_fit", "plain_loop", "cr_local", "tfcm_async", "cr_gcs")
LABELS = {
    "plain_fit": "plain `fit`, no checkpoints",
    "plain_loop": "plain hand-written loop, no checkpoints",
    "cr_local": "colab_resume, local disk",
    "tfcm_async": "TF `CheckpointManager` async, local disk",
    "cr_gcs": "colab_resume, GCS emulator",
}
# Contenders whose store is the emulator, a process of its own.
ON_SERVER = ("cr_gcs",)


def plan_runs(cadences: list[int], tf: bool) -> dict[str, dict]:
    """Run name (``contender`` or ``contender@cadence``) -> its worker plan."""
    plans: dict[str, dict] = {"plain_fit": {"save_every": cadences[0]}}
    if tf:
        plans["plain_loop"] = {"save_every": cadences[0]}
    for cadence in cadences:
        for contender in ("cr_local", "tfcm_async", "cr_gcs"):
            if tf or contender != "tfcm_async":
                plans[f"{contender}@{cadence}"] = {"save_every": cadence}
    return plans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--save-every", default="10")
    parser.add_argument(
        "--no-tf", action="store_true", help="skip plain_loop and tfcm_async"
    )
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    cadences = [int(c) for c in args.save_every.split(",")]
    plans = plan_runs(cadences, tf=not args.no_tf)
    started = time.perf_counter()
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
                if name.startswith("cr_"):
                    print(f"[overhead] profile: {name}", file=sys.stderr)
                    out = os.path.join(root, f"profile-{len(profiles)}.json")
                    _timed(runner, name, {**shape, **plan, "profile": out})
                    with open(out) as handle:
                        profiles[name] = json.load(handle)
    finally:
        emulator.stop()
    print(report(runs, args))
    print("\n" + pairs(runs, cadences))
    if profiles:
        print("\n" + profile_table(profiles))
    print(f"\n(the whole command took {time.perf_counter() - started:.0f} s)")
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
    """Seconds of the agent's training and upload threads per part, per run."""
    names = list(profiles)

    def row(label: str, values: list[str]) -> str:
        return f"| {label} | " + " | ".join(values) + " |"

    lines = [
        "Where the agent's time went, cProfile (one untimed run each; "
        "cumulative wall seconds, nested parts overlap):",
        "",
        row("part", [_label(n) for n in names]),
        "|---|" + "---|" * len(names),
        row(
            "whole training (profiled)",
            [f"{profiles[n]['train_s']:.2f}" for n in names],
        ),
        row("process CPU seconds", [f"{profiles[n]['cpu_s']:.2f}" for n in names]),
        row("**training thread**", [""] * len(names)),
    ]
    for part in profiles[names[0]]["parts"]:
        lines.append(
            row(part, [f"{profiles[n]['parts'].get(part, 0.0):.3f}" for n in names])
        )
    uploads = [profiles[n].get("upload") or {} for n in names]
    lines += [
        row("**upload thread**", [""] * len(names)),
        row("upload jobs (saves)", [str(u.get("jobs", "-")) for u in uploads]),
        row("jobs' wall seconds", [f"{u.get('wall_s', 0.0):.3f}" for u in uploads]),
        row(
            "upload thread's CPU seconds",
            [f"{u.get('cpu_s', 0.0):.3f}" for u in uploads],
        ),
        row(
            "transfer pool threads' CPU seconds",
            [f"{u.get('pool_cpu_s', 0.0):.3f}" for u in uploads],
        ),
    ]
    labels = next((list(u["parts"]) for u in uploads if u.get("parts")), [])
    for part in labels:
        lines.append(
            row(part, [f"{u.get('parts', {}).get(part, 0.0):.3f}" for u in uploads])
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


def _label(name: str) -> str:
    contender, _, cadence = name.partition("@")
    return LABELS[contender] + (f", every {cadence}" if cadence else "")


def _with_server(run: dict, name: str) -> float | None:
    """The run's CPU seconds, with the storage server's for a GCS contender."""
    if not run["cpu_s"]:
        return None
    if name.split("@")[0] in ON_SERVER:
        if run.get("server_cpu_s") is None:
            return None
        return float(run["cpu_s"] + run["server_cpu_s"])
    return float(run["cpu_s"])


def _spread(values: list[float], bold: bool = False) -> str:
    """Median (min-max), the median in bold if asked."""
    values = sorted(values)
    median = f"{statistics.median(values):.3f}"
    if bold:
        median = f"**{median}**"
    return f"{median} ({values[0]:.3f}-{values[-1]:.3f})"


def command(args: argparse.Namespace) -> str:
    return (
        f"python bench/head_to_head/overhead.py --repeats {args.repeats} "
        f"--epochs {args.epochs} --steps-per-epoch {args.steps_per_epoch} "
        f"--save-every {args.save_every}{' --no-tf' if args.no_tf else ''}"
        f"{' --profile' if args.profile else ''}"
    )


def report(runs: dict[str, list[dict]], args: argparse.Namespace) -> str:
    base = runs["plain_fit"]
    steps = args.epochs * args.steps_per_epoch
    lines = [
        f"`{command(args)}` ({steps} steps; a save every N steps as named, "
        "the baselines none; ratios over plain fit's run in the same round)",
        "",
        "| contender | training time, median | / plain fit, median (min-max) "
        "| step time / plain fit's, median (min-max) | CPU / plain fit's, median "
        "| storage server CPU, median | CPU with the server's / plain fit's, median "
        "| stalls (gaps over 4x the median step), median (min-max) "
        "| blocking per save, median |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in runs.items():
        on_server = name.split("@")[0] in ON_SERVER
        times = [r["train_s"] for r in rows]
        ratios = [r["train_s"] / b["train_s"] for r, b in zip(rows, base, strict=True)]
        paces = [r["step_s"] / b["step_s"] for r, b in zip(rows, base, strict=True)]
        cpus = [
            r["cpu_s"] / b["cpu_s"]
            for r, b in zip(rows, base, strict=True)
            if r["cpu_s"] and b["cpu_s"]
        ]
        totals = [
            spent / b["cpu_s"]
            for r, b in zip(rows, base, strict=True)
            if (spent := _with_server(r, name)) is not None and b["cpu_s"]
        ]
        blocks = [r["block_s"] for r in rows if r["block_s"] is not None]
        block = f"{statistics.median(blocks) * 1e3:.1f} ms" if blocks else "-"
        cpu = f"{statistics.median(cpus):.3f}" if cpus else "-"
        served = [r["server_cpu_s"] for r in rows if r.get("server_cpu_s") is not None]
        server = f"{statistics.median(served):.2f} s" if served and on_server else "-"
        total = f"{statistics.median(totals):.3f}" if totals and on_server else "-"
        stalls = sorted(r["stall_s"] for r in rows)
        lines.append(
            f"| {_label(name)} | {statistics.median(times):.2f} s "
            f"| {_spread(ratios, bold=True)} | {_spread(paces)} | {cpu} | {server} "
            f"| {total} | {statistics.median(stalls):.2f} s "
            f"({stalls[0]:.2f}-{stalls[-1]:.2f}) | {block} |"
        )
    return "\n".join(lines)


def pairs(runs: dict[str, list[dict]], cadences: list[int]) -> str:
    """Runs of the same round that differ in one thing, one over the other."""
    wanted: list[tuple[str, str, str]] = []
    for cadence in cadences:
        wanted += [
            (f"cr_local@{cadence}", "plain_fit", "the agent's checkpoints"),
            (f"tfcm_async@{cadence}", "plain_loop", "TF's async checkpoints"),
            (f"cr_gcs@{cadence}", f"cr_local@{cadence}", "the store"),
        ]
    wanted.append(("plain_loop", "plain_fit", "the training loop"))
    lines = [
        "Each difference, one cause (per round: the first run over the second "
        "of the same round; median (min-max); CPU with the storage server's):",
        "",
        "| runs | what differs | whole run | step time | CPU, median |",
        "|---|---|---|---|---|",
    ]
    measures: dict[str, Callable[[dict, str], float | None]] = {
        "train": lambda r, n: r["train_s"],
        "step": lambda r, n: r["step_s"],
        "cpu": lambda r, n: _with_server(r, n),
    }
    for top, bottom, cause in wanted:
        if top not in runs or bottom not in runs:
            continue
        cells = {}
        for key, measure in measures.items():
            ratios = [
                a / b
                for x, y in zip(runs[top], runs[bottom], strict=True)
                if (a := measure(x, top)) is not None
                and (b := measure(y, bottom)) is not None
                and b
            ]
            cells[key] = ratios
        cpu = f"{statistics.median(cells['cpu']):.3f}" if cells["cpu"] else "-"
        lines.append(
            f"| {_label(top)} / {_label(bottom)} | {cause} "
            f"| {_spread(cells['train'])} | {_spread(cells['step'])} | {cpu} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

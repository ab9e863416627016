"""Training overhead and save blocking: plain Keras vs the agent vs TF async.

    python bench/head_to_head/overhead.py [--repeats 3] [--epochs 4]

The head-to-head workload (``workload.py``: a 2.1M-parameter MLP under a
2-replica MirroredStrategy on CPU), a save every 10 steps, uninterrupted,
each run a fresh process:

- ``plain_fit``: Keras ``model.fit``, no checkpoints (the baseline);
- ``cr_gcs``: ``Agent.fit`` on the GCS emulator, 1 s heartbeats;
- ``tfcm_async``: a hand-written loop saving with TensorFlow's own async
  checkpointing (``tf.train.CheckpointManager``, local disk).

Runs are interleaved (plain, agent, TF async, plain, ...), so noise from
other work on the machine hits all alike. Prints, per contender, the median
(min-max) of its whole-training time over plain ``fit``'s in the same
round; the same for the median time of one step (the steady pace, which
start-up, epoch ends and TensorFlow's occasional multi-second stall when it
makes an iterator do not touch); and the median blocking time per save (the
wall time of the save call) — the median over runs of each run's median.
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args(argv)
    emulator = head_to_head._load_emulator()()
    emulator.create_bucket(scenarios.BUCKET)
    runs: dict[str, list[dict]] = {c: [] for c in CONTENDERS}
    try:
        with tempfile.TemporaryDirectory(prefix="overhead-") as root:
            runner = scenarios.Runner(root, emulator.url)
            for round_ in range(args.repeats):
                for contender in CONTENDERS:
                    print(
                        f"[overhead] round {round_ + 1}: {contender}", file=sys.stderr
                    )
                    p = runner.run(contender, "clean", epochs=args.epochs)
                    if not p.first("done"):
                        raise SystemExit(f"{contender} failed:\n{p.stderr}")
                    blocks = sorted(e["block_s"] for e in p.all("save"))
                    runs[contender].append(
                        {
                            "train_s": p.first("train_end")["seconds"],
                            "block_s": statistics.median(blocks) if blocks else None,
                            "step_s": _median_step(p.all("step")),
                        }
                    )
                    scenarios._delete(runner, contender, "clean")
    finally:
        emulator.stop()
    print(report(runs, args))
    return 0


def _median_step(steps: list[dict]) -> float:
    """The median time from one step's end to the next's: the steady pace,
    untouched by start-up, epoch ends and the rare stall."""
    times = [e["t"] for e in steps]
    return statistics.median(b - a for a, b in zip(times, times[1:], strict=False))


def report(runs: dict[str, list[dict]], args: argparse.Namespace) -> str:
    base = [r["train_s"] for r in runs["plain_fit"]]
    base_step = [r["step_s"] for r in runs["plain_fit"]]
    lines = [
        f"`python bench/head_to_head/overhead.py --repeats {args.repeats} "
        f"--epochs {args.epochs}` ({args.epochs * 20} steps, a save every 10)",
        "",
        "| contender | training time, median | / plain fit, median (min-max) "
        "| step time / plain fit's, median (min-max) | blocking per save, median |",
        "|---|---|---|---|---|",
    ]
    for contender in CONTENDERS:
        times = [r["train_s"] for r in runs[contender]]
        ratios = sorted(t / b for t, b in zip(times, base, strict=True))
        paces = sorted(
            r["step_s"] / b for r, b in zip(runs[contender], base_step, strict=True)
        )
        blocks = [r["block_s"] for r in runs[contender] if r["block_s"] is not None]
        block = f"{statistics.median(blocks) * 1e3:.1f} ms" if blocks else "-"
        lines.append(
            f"| {contender} | {statistics.median(times):.2f} s "
            f"| **{statistics.median(ratios):.3f}** ({ratios[0]:.3f}-{ratios[-1]:.3f}) "
            f"| {statistics.median(paces):.3f} ({paces[0]:.3f}-{paces[-1]:.3f}) "
            f"| {block} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

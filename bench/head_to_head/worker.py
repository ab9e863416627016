"""One training process of one contender; the driver starts, kills and reruns it.

    python bench/head_to_head/worker.py CONTENDER DIR EVENTS.jsonl OUT.npz
        [--endpoint URL] [--epochs E] [--steps-per-epoch S] [--save-every N]
        [--kill-at-step N] [--kill-in-save-from-step N] [--kill-after-steps K]
        [--unavailable-at-step N] [--settle-kill-at-step N]
        [--exit-after-steps K] [--step-sleep S] [--profile OUT.json]

Writes every model and optimizer variable to OUT.npz when training ends,
and what happened to EVENTS.jsonl as it happens (see ``faults``). Exit
status: 0 done, 2 an error (recorded as an ``error`` event), 3 refused
because another live session owns the run (colab_resume only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(os.path.dirname(HERE)))

from faults import EventLog, FaultPlan, Faults  # noqa: E402
from workload import Schedule  # noqa: E402

CONTENDERS = (
    "plain_fit",
    "plain_loop",
    "bar",
    "tfcm",
    "tfcm_async",
    "cr_gcs",
    "cr_local",
)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("contender", choices=CONTENDERS)
    parser.add_argument("directory", help="checkpoint directory or gs:// URL")
    parser.add_argument("events")
    parser.add_argument("out")
    parser.add_argument("--endpoint", help="GCS emulator URL (cr_gcs)")
    parser.add_argument("--epochs", type=int, default=Schedule.epochs)
    parser.add_argument("--steps-per-epoch", type=int, default=Schedule.steps_per_epoch)
    parser.add_argument("--save-every", type=int, default=Schedule.save_every)
    parser.add_argument(
        "--profile",
        help="write where the training thread's time went (cProfile) to this JSON",
    )
    for name in FaultPlan.__dataclass_fields__:
        kind = float if name in ("kill_delay", "step_sleep") else int
        parser.add_argument("--" + name.replace("_", "-"), type=kind)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    events = EventLog(args.events)
    events.emit("process", pid=os.getpid())
    schedule = Schedule(
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        save_every=args.save_every,
    )
    plan = FaultPlan(
        **{
            name: getattr(args, name)
            for name in FaultPlan.__dataclass_fields__
            if getattr(args, name) is not None
        }
    )
    try:
        return _train(args, schedule, plan, events)
    except Exception as exc:
        refused = type(exc).__name__ == "RunInUseError"
        events.emit(
            "refused" if refused else "error",
            type=type(exc).__name__,
            message=str(exc)[:300],
        )
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 3 if refused else 2


def _train(
    args: argparse.Namespace, schedule: Schedule, plan: FaultPlan, events: EventLog
) -> int:
    import contenders
    import numpy as np
    from workload import Data, mirrored_strategy, setup_determinism, variables_of

    agent = None
    if args.contender.startswith("cr_"):
        from colab_resume import Agent

        agent = Agent(
            args.directory,
            save_every_steps=schedule.save_every,
            save_every_seconds=None,
            # Short beats so a dead holder is recognised within seconds and a
            # live one is seen beating; the defaults are 10 s / 40 s.
            heartbeat_seconds=1.0,
            dead_after_seconds=3.0,
            storage_options=(
                {"token": "anon", "endpoint_url": args.endpoint}
                if args.endpoint
                else None
            ),
            prefer="cpu",
            cpu_replicas=2,
            recovery_backoff_seconds=0.1,
        )
        strategy = agent.connect()
    else:
        strategy = mirrored_strategy()
    setup_determinism()

    faults = Faults(plan, events)
    if agent is not None:
        # Wait for the upload in flight to commit (a death after it).
        # Internal: the agent's checkpoint manager, while it holds the run.
        faults.settle = lambda: (m := agent._loop.checkpoints) and m.wait()
    ctx = contenders.Context(
        strategy=strategy,
        data=Data(),
        schedule=schedule,
        faults=faults,
        directory=args.directory,
    )
    events.emit("train_begin")
    profiler = _Profile() if args.profile else None
    started = time.perf_counter()
    cpu_started = os.times()
    if args.contender == "plain_fit":
        model = contenders.train_plain_fit(ctx)
    elif args.contender == "bar":
        model = contenders.train_bar(ctx)
    elif args.contender in ("plain_loop", "tfcm", "tfcm_async"):
        mode = {"plain_loop": "none", "tfcm": "sync", "tfcm_async": "async"}
        model = contenders.train_loop(ctx, mode[args.contender])
    else:
        model = contenders.train_cr(ctx, agent)
    seconds = time.perf_counter() - started
    cpu = os.times()
    cpu_s = cpu.user + cpu.system - cpu_started.user - cpu_started.system
    if profiler is not None:
        profiler.write(args.profile, seconds, cpu_s)
    events.emit(
        "train_end",
        seconds=round(seconds, 4),
        cpu_s=round(cpu_s, 4),
        recoveries=getattr(agent, "recoveries", 0),
    )
    np.savez(args.out, **variables_of(model))
    events.emit("done", step=faults.step)
    return 0


class _Profile:
    """cProfile of the training thread, summed into the agent's own parts.

    Only the training thread is profiled (the upload and heartbeat threads
    are seen through the process's CPU time); a profiled run is slower, so
    it is never one of the timed rounds.
    """

    # Where the agent's time on the training thread goes, by function.
    PARTS = {
        "step duties (after every step)": ("steps.py", "after_step"),
        "save: snapshot (metrics, extras, fingerprint)": ("keras_fit.py", "snapshot"),
        "save: data fingerprint (make_dataset + 1st batch)": (
            "fingerprints.py",
            "record",
        ),
        "save: host copy of the variables": ("state.py", "write"),
        "save: wait for the previous upload": ("manager.py", "_wait_for_upload"),
        "epoch datasets (make_dataset)": ("keras_fit.py", "_epoch_data"),
        "restore (none on a fresh run)": ("manager.py", "restore"),
        "lease and session (take the run)": ("loop.py", "take_run"),
        "final save + wait for its commit": ("loop.py", "finish"),
        "Keras fit (everything, agent hooks included)": ("trainer.py", "fit"),
    }

    def __init__(self) -> None:
        import cProfile

        self.profile = cProfile.Profile()
        self.profile.enable()

    def write(self, path: str, seconds: float, cpu_s: float) -> None:
        import json
        import pstats

        self.profile.disable()
        stats = pstats.Stats(self.profile).stats  # type: ignore[attr-defined]
        parts: dict[str, float] = {}
        for label, (file_end, function) in self.PARTS.items():
            parts[label] = sum(
                value[3]
                for (file, _, name), value in stats.items()
                if name == function and file.endswith(file_end)
            )
        with open(path, "w") as out:
            json.dump({"train_s": seconds, "cpu_s": cpu_s, "parts": parts}, out)


if __name__ == "__main__":
    sys.exit(main())

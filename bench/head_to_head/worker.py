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
from typing import Any

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
                if args.endpoint and args.contender == "cr_gcs"
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
    profiler = _Profile(uploads=agent is not None) if args.profile else None
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
    """cProfile of the training thread and of the upload thread, summed into
    the agent's own parts.

    The training thread is profiled from here on. Each upload job is
    profiled on the agent's upload thread (its ``Uploader._run`` wrapped,
    from outside the package), with that thread's CPU seconds. The
    transfer pool's threads (copies or HTTP uploads to the store) are not
    profiled, but their CPU seconds are counted; the heartbeat thread is
    seen only through the process's CPU time. cProfile's times are wall
    time. A profiled run is slower, so it is never one of the timed rounds.
    """

    # Where the agent's time on the training thread goes, by function.
    PARTS = {
        "step duties (after every step, saves included)": (
            "agent/steps.py",
            "after_step",
        ),
        "save, whole (the agent's Steps.save)": ("agent/steps.py", "save"),
        "save: snapshot (metrics, extras, fingerprint)": (
            "agent/keras_fit.py",
            "snapshot",
        ),
        "save: data fingerprint (make_dataset + 1st batch)": (
            "agent/fingerprints.py",
            "record",
        ),
        "save: CheckpointManager.save (wait, staging dir, variables)": (
            "checkpoint/manager.py",
            "save",
        ),
        "save: wait for the previous upload": (
            "checkpoint/manager.py",
            "_wait_for_upload",
        ),
        "save: an old staging dir removed": ("shutil.py", "rmtree"),
        "save: snapshot of the variables (ArrayState.write)": (
            "portable/state.py",
            "write",
        ),
        "epoch datasets (make_dataset)": ("agent/keras_fit.py", "_epoch_data"),
        "restore (none on a fresh run)": ("checkpoint/manager.py", "restore"),
        "lease and session (take the run)": ("agent/loop.py", "take_run"),
        "final save + wait for its commit": ("agent/loop.py", "finish"),
        "Keras fit (everything, agent hooks included)": ("trainer.py", "fit"),
    }

    # Where the upload thread's time goes, by function (one job per save).
    UPLOAD_PARTS = {
        "upload jobs, whole": ("checkpoint/manager.py", "_upload_and_commit"),
        "sync, whole (ArrayState.sync)": ("portable/state.py", "sync"),
        "sync: shards serialised and written to staging": (
            "portable/shards.py",
            "write_shards",
        ),
        "sync: of which CRC32C": ("storage/checksum.py", "update"),
        "one-call read traced, after the first commit (once)": (
            "portable/state.py",
            "_trace_reader",
        ),
        "transfer to the store (waits on its thread pool)": (
            "checkpoint/transfer.py",
            "upload",
        ),
        "manifest written (commit)": ("storage/store.py", "write_json"),
        "old checkpoints pruned": ("checkpoint/manager.py", "_prune_quietly"),
        "staging dir removed": ("shutil.py", "rmtree"),
    }

    def __init__(self, uploads: bool) -> None:
        import cProfile
        import threading

        self.profile = cProfile.Profile()
        self.upload_profile = cProfile.Profile()
        self.upload_jobs = 0
        self.upload_cpu_s = 0.0
        self.upload_wall_s = 0.0
        self.pool_cpu_s = 0.0
        self._pool_lock = threading.Lock()
        # Held by the upload thread while a job is profiled.
        self._upload_lock = threading.Lock()
        if uploads:
            self._wrap_uploads()
        self.profile.enable()

    def _wrap_uploads(self) -> None:
        from colab_resume.checkpoint import uploader

        original = uploader.Uploader._run
        profiler = self

        def run(self: Any, name: str, job: Any) -> None:
            with profiler._upload_lock:
                cpu, wall = time.thread_time(), time.perf_counter()
                profiler.upload_profile.enable()
                try:
                    original(self, name, job)
                finally:
                    profiler.upload_profile.disable()
                    profiler.upload_jobs += 1
                    profiler.upload_cpu_s += time.thread_time() - cpu
                    profiler.upload_wall_s += time.perf_counter() - wall

        uploader.Uploader._run = run  # type: ignore[method-assign]

        # The transfer pool's threads: their CPU seconds, not their profile.
        from colab_resume.checkpoint import transfer

        run_all = transfer._run_all

        def timed_run_all(func: Any, items: Any, workers: int) -> None:
            def timed(item: Any) -> None:
                cpu = time.thread_time()
                try:
                    func(item)
                finally:
                    spent = time.thread_time() - cpu
                    with profiler._pool_lock:
                        profiler.pool_cpu_s += spent

            run_all(timed, items, workers)

        transfer._run_all = timed_run_all

    @staticmethod
    def _parts(profile: Any, parts: dict[str, tuple[str, str]]) -> dict[str, float]:
        import pstats

        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        return {
            label: sum(
                value[3]
                for (file, _, name), value in stats.items()
                if name == function and file.endswith(file_end)
            )
            for label, (file_end, function) in parts.items()
        }

    def write(self, path: str, seconds: float, cpu_s: float) -> None:
        import json

        self.profile.disable()
        parts = self._parts(self.profile, self.PARTS)
        with self._upload_lock:  # the last job's profile is complete
            upload = {
                "jobs": self.upload_jobs,
                "wall_s": self.upload_wall_s,
                "cpu_s": self.upload_cpu_s,
                "pool_cpu_s": self.pool_cpu_s,
                "parts": (
                    self._parts(self.upload_profile, self.UPLOAD_PARTS)
                    if self.upload_jobs
                    else {}
                ),
            }
        with open(path, "w") as out:
            json.dump(
                {"train_s": seconds, "cpu_s": cpu_s, "parts": parts, "upload": upload},
                out,
            )


if __name__ == "__main__":
    sys.exit(main())

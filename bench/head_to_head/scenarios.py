"""The scenarios: real worker processes started, killed and rerun by the driver.

Each function runs one scenario for one contender and returns plain dicts of
what was measured; :mod:`report` turns them into tables. Contenders are
interleaved by the driver (scenario by scenario), so machine noise hits
them alike.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from faults import read_events

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
BUCKET = "bench"

# Kill points, as global steps of the default schedule (4 epochs x 20 steps,
# a save every 10). 37: mid-epoch, 7 steps after the save at 30. 60: the
# first save at or after step 60, killed 10 ms after the save call starts.
# Then a third process dies 3 steps after it resumed, before saving anything.
MID_EPOCH_STEP = 37
SAVE_KILL_STEP = 60
AGAIN_AFTER_STEPS = 3
UNAVAILABLE_STEP = 37
DAMAGE_AFTER_STEP = 45  # saves at 10..40 complete, then death


@dataclasses.dataclass
class Process:
    """One finished worker process."""

    rc: int
    wall: float
    events: list[dict[str, Any]]
    out: str
    stderr: str

    def first(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["ev"] == name), None)

    def all(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["ev"] == name]

    @property
    def steps(self) -> list[int]:
        return [e["step"] for e in self.all("step")]

    @property
    def start_step(self) -> int | None:
        """Where training in this process started: the last restart point
        reported before its first step."""
        start = None
        for event in self.events:
            if event["ev"] == "step":
                break
            if event["ev"] == "start":
                start = event["step"]
        return start

    @property
    def in_process_restarts(self) -> list[dict[str, int]]:
        """Restarts inside this process (a recovery), after training began."""
        restarts, last, began = [], None, False
        for event in self.events:
            if event["ev"] == "step":
                began, last = True, event["step"]
            elif event["ev"] == "start" and began and last is not None:
                restarts.append(
                    {
                        "died_at": last,
                        "resumed_from": event["step"],
                        "redone": last - event["step"],
                    }
                )
        return restarts

    @property
    def last_step(self) -> int | None:
        steps = self.steps
        return steps[-1] if steps else None

    @property
    def error(self) -> str | None:
        for name in ("error", "refused"):
            event = self.first(name)
            if event is not None:
                return f"{event['type']}: {event['message']}"
        return None


class Runner:
    """Starts workers; knows where each contender's directory lives."""

    def __init__(self, root: str, endpoint: str | None) -> None:
        self.root = root
        self.endpoint = endpoint
        self._count = 0

    def directory(self, contender: str, tag: str) -> str:
        if contender == "cr_gcs":
            return f"gs://{BUCKET}/{tag}/{contender}"
        return os.path.join(self.root, tag, contender)

    def _paths(self, contender: str, tag: str) -> tuple[str, str]:
        self._count += 1
        base = os.path.join(self.root, "logs", f"{self._count:03d}-{tag}-{contender}")
        os.makedirs(os.path.dirname(base), exist_ok=True)
        return base + ".jsonl", base + ".npz"

    def start(self, contender: str, tag: str, **plan: Any) -> tuple[Any, str, str]:
        """Start a worker; returns (Popen, events path, out path)."""
        events, out = self._paths(contender, tag)
        cmd = [sys.executable, WORKER, contender, self.directory(contender, tag)]
        cmd += [events, out]
        if self.endpoint:
            cmd += ["--endpoint", self.endpoint]
        for name, value in plan.items():
            cmd += ["--" + name.replace("_", "-"), str(value)]
        popen = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        return popen, events, out

    def run(self, contender: str, tag: str, **plan: Any) -> Process:
        started = time.perf_counter()
        popen, events, out = self.start(contender, tag, **plan)
        _, stderr = popen.communicate()
        return Process(
            rc=popen.returncode,
            wall=time.perf_counter() - started,
            events=read_events(events),
            out=out,
            stderr=stderr[-2000:],
        )


# --- the scenarios -------------------------------------------------------------------


def uninterrupted(runner: Runner, contender: str) -> dict[str, Any]:
    """One run start to end: the reference weights, save blocking, whole-run time."""
    p = runner.run(contender, "clean")
    _check_done(p, contender, "clean run")
    blocks = sorted(e["block_s"] for e in p.all("save"))
    return {
        "train_s": p.first("train_end")["seconds"],
        "process_s": p.wall,
        "saves": len(blocks),
        "block_median_s": blocks[len(blocks) // 2] if blocks else None,
        "block_max_s": blocks[-1] if blocks else None,
        "out": p.out,
    }


def _run_to_end(
    runner: Runner, contender: str, tag: str, plans: list[dict[str, Any]]
) -> dict[str, Any]:
    """Run ``plans`` in turn (a death each), then rerun plainly until training ends.

    A rerun that fails before training a step (its checkpoint cannot be
    read) gets the only fix its user has: delete the directory, start over.
    """
    processes: list[Process] = []
    notes: list[str] = []
    queue = list(plans)
    while len(processes) < len(plans) + 4:
        plan = queue.pop(0) if queue else {}
        p = runner.run(contender, tag, **plan)
        processes.append(p)
        if p.first("done"):
            break
        if p.error and not p.steps and p.first("unavailable") is None:
            notes.append(f"resume failed ({p.error[:120]}); directory deleted")
            _delete(runner, contender, tag)
    deaths = []
    for before, after in zip(processes, processes[1:], strict=False):
        died = before.last_step
        if died is None:
            continue
        resumed = after.start_step if after.start_step is not None else 0
        deaths.append(
            {"died_at": died, "resumed_from": resumed, "redone": died - resumed}
        )
    recoveries = [r for p in processes for r in p.in_process_restarts]
    executed = sum(len(p.steps) for p in processes)
    last = processes[-1]
    return {
        "processes": len(processes),
        "deaths": deaths,
        "in_process_restarts": recoveries,
        "executed": executed,
        "wall_s": sum(p.wall for p in processes),
        "train_s": sum(
            (p.first("train_end") or {}).get("seconds", 0.0) for p in processes
        ),
        "done": bool(last.first("done")),
        "out": last.out if last.first("done") else None,
        "notes": notes,
        "kill_landed": [
            (e["step"], e["how"]) for p in processes for e in p.all("kill")
        ],
        "save_returned_before_kill": [
            _save_returned(p) for p in processes if _killed_in_save(p)
        ],
    }


def kill_schedule(runner: Runner, contender: str) -> dict[str, Any]:
    """Mid-epoch death, death during a save, death again right after resuming."""
    plans = [
        {"kill_at_step": MID_EPOCH_STEP},
        {"kill_in_save_from_step": SAVE_KILL_STEP},
        {"kill_after_steps": AGAIN_AFTER_STEPS},
    ]
    return _run_to_end(runner, contender, "kills", plans)


def unavailable(runner: Runner, contender: str) -> dict[str, Any]:
    """``tf.errors.UnavailableError`` from inside training; rerun if it crashes."""
    return _run_to_end(
        runner, contender, "unavailable", [{"unavailable_at_step": UNAVAILABLE_STEP}]
    )


def damaged_newest(runner: Runner, contender: str, mode: str) -> dict[str, Any]:
    """Die with complete checkpoints, damage the newest one's data, resume once."""
    first = runner.run(contender, "damage", settle_kill_at_step=DAMAGE_AFTER_STEP)
    damaged = damage_newest(runner, contender, "damage", mode)
    second = runner.run(contender, "damage", exit_after_steps=1)
    if second.error:
        outcome = f"error: {second.error[:160]}"
    elif second.start_step is None:
        outcome = f"no step trained (rc {second.rc})"
    elif second.start_step == 0:
        outcome = "started from step 0 (fresh)"
    else:
        outcome = f"resumed from step {second.start_step}"
    return {
        "died_at": first.last_step,
        "damaged": damaged,
        "outcome": outcome,
        "rc": second.rc,
        "start": second.start_step,
    }


def liveness(runner: Runner, contender: str) -> dict[str, Any]:
    """A second process on the same directory while the first is alive."""
    first, first_events, _ = runner.start(contender, "live", step_sleep=0.2)
    # Let the first one train and save once: it has plainly taken the run.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if any(e["ev"] == "save" for e in read_events(first_events)):
            break
        if first.poll() is not None:
            break
        time.sleep(0.1)
    second_started = time.time()
    second = runner.run(contender, "live", exit_after_steps=12)
    first_alive = first.poll() is None
    first.kill()
    first.wait()
    a_events = read_events(first_events)
    a_saves_during = [
        e["step"]
        for e in a_events
        if e["ev"] == "save"
        and second_started <= e["wall"] <= second_started + second.wall
    ]
    b_saves = [e["step"] for e in second.all("save")]
    if second.error:
        verdict = f"refused ({second.error.split(':')[0]}) after {second.wall:.1f}s"
    else:
        verdict = (
            f"trained {len(second.steps)} steps from step {second.start_step}, "
            f"saved at {b_saves or 'none'}"
        )
    return {
        "first_alive": first_alive,
        "second": verdict,
        "second_saves": b_saves,
        "first_saves_meanwhile": a_saves_during,
        "both_wrote": bool(b_saves) and bool(a_saves_during),
    }


# --- helpers -------------------------------------------------------------------------


def _check_done(p: Process, contender: str, what: str) -> None:
    if not p.first("done"):
        raise RuntimeError(
            f"{contender} {what} did not finish (rc {p.rc}):\n{p.stderr}"
        )


def _killed_in_save(p: Process) -> bool:
    return any(e.get("how") == "during save" for e in p.all("kill"))


def _save_returned(p: Process) -> bool:
    """Did the save call return before the kill landed (an async save)?"""
    kill = next(e for e in p.all("kill") if e.get("how") == "during save")
    return any(e["step"] == kill["step"] for e in p.all("save"))


def _gcs(runner: Runner) -> Any:
    import gcsfs

    return gcsfs.GCSFileSystem(token="anon", endpoint_url=runner.endpoint)


def _delete(runner: Runner, contender: str, tag: str) -> None:
    directory = runner.directory(contender, tag)
    if contender == "cr_gcs":
        fs = _gcs(runner)
        if fs.exists(directory):
            fs.rm(directory, recursive=True)
    else:
        shutil.rmtree(directory, ignore_errors=True)


def damage_newest(runner: Runner, contender: str, tag: str, mode: str) -> str:
    """Damage the largest data file of the newest checkpoint; returns its name.

    ``mode`` is ``flip`` (invert 64 bytes in the middle, size unchanged) or
    ``truncate`` (cut the file to half).
    """
    directory = runner.directory(contender, tag)
    if contender == "cr_gcs":
        fs = _gcs(runner)
        newest = sorted(fs.ls(f"{directory}/checkpoints"))[-1]
        files = [f for f in fs.ls(newest, detail=True) if ".data-" in f["name"]]
        target = max(files, key=lambda f: f["size"])["name"]
        data = _damaged(fs.cat_file(target), mode)
        fs.pipe_file(target, data)
        return target.split(f"{BUCKET}/", 1)[-1]
    if contender == "bar":
        target = os.path.join(directory, "latest.weights.h5")
    elif contender.startswith("tfcm"):
        files = glob.glob(os.path.join(directory, "ckpt-*.data-*"))
        target = max(files, key=lambda f: int(os.path.basename(f)[5:].split(".")[0]))
    else:
        newest = sorted(glob.glob(os.path.join(directory, "checkpoints", "step-*")))[-1]
        target = max(glob.glob(os.path.join(newest, "*.data-*")), key=os.path.getsize)
    with open(target, "rb") as f:
        data = _damaged(f.read(), mode)
    with open(target, "wb") as f:
        f.write(data)
    return os.path.relpath(target, directory)


def _damaged(data: bytes, mode: str) -> bytes:
    if mode == "truncate":
        return data[: len(data) // 2]
    middle = len(data) // 2
    flipped = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    return data[:middle] + flipped + data[middle + 64 :]

"""Deaths and faults a worker inflicts on itself, and the events it leaves behind.

Every kill is a real ``SIGKILL`` of the worker's own process: no Python
cleanup, no ``finally``, no ``atexit``, no flush of anything TensorFlow or
a storage client still holds. Events are written one line at a time to an
unbuffered file, so what was written before the kill survives it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any


class EventLog:
    """Append-only JSON lines; each ``emit`` is one ``write`` that survives SIGKILL."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._started = time.monotonic()
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        record = {
            "ev": event,
            "t": round(time.monotonic() - self._started, 4),
            "wall": round(time.time(), 4),  # orders events across processes
        }
        record.update(fields)
        line = (json.dumps(record) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)


def read_events(path: str) -> list[dict[str, Any]]:
    """The events a worker wrote (a torn last line from a kill is dropped)."""
    if not os.path.exists(path):
        return []
    events = []
    with open(path) as f:
        for line in f:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FaultPlan:
    """What this process does to itself, by global step.

    Attributes:
        kill_at_step: SIGKILL right after this global step.
        kill_in_save_from_step: SIGKILL ``kill_delay`` seconds after the first
            save at or after this step *starts* (from a helper thread, so the
            kill lands inside a synchronous write, or while an asynchronous
            write / upload is in flight).
        kill_delay: see ``kill_in_save_from_step``.
        kill_after_steps: SIGKILL after this many steps of this process.
        unavailable_at_step: raise ``tf.errors.UnavailableError`` there once.
        settle_kill_at_step: wait for pending saves to finish, then SIGKILL
            (a death that leaves the newest checkpoint complete).
        exit_after_steps: ``os._exit(0)`` after this many steps of this process
            (a quick look at where a resume starts, without finishing).
        step_sleep: seconds to sleep after every step (keeps a process alive
            while a second one is started on the same directory).
    """

    kill_at_step: int | None = None
    kill_in_save_from_step: int | None = None
    kill_delay: float = 0.01
    kill_after_steps: int | None = None
    unavailable_at_step: int | None = None
    settle_kill_at_step: int | None = None
    exit_after_steps: int | None = None
    step_sleep: float = 0.0


class Faults:
    """Applies a :class:`FaultPlan`; the contenders call ``after_step`` and wrap saves.

    Args:
        plan: what to do.
        events: where steps, saves and faults are recorded.
        settle: waits until every started save is complete on storage.
    """

    def __init__(
        self,
        plan: FaultPlan,
        events: EventLog,
        settle: Callable[[], None] = lambda: None,
    ) -> None:
        self.plan = plan
        self.events = events
        self.settle = settle
        self.steps_here = 0
        self.step = 0
        self._raised = False
        self._kill_armed = plan.kill_in_save_from_step is not None

    def started(self, step: int) -> None:
        """Training in this process starts after global step ``step``."""
        self.step = step
        self.events.emit("start", step=step)

    def after_step(self, step: int) -> None:
        """Called after every completed global step (1-based)."""
        import tensorflow as tf

        if step != self.step + 1:
            # A restore moved the step (a resume, or an in-process recovery):
            # the contender's real restart point is the step before this one.
            self.events.emit("start", step=step - 1)
        self.step = step
        self.steps_here += 1
        self.events.emit("step", step=step)
        plan = self.plan
        if plan.step_sleep:
            time.sleep(plan.step_sleep)
        if step == plan.kill_at_step or self.steps_here == plan.kill_after_steps:
            self.events.emit("kill", step=step, how="after step")
            sigkill_self()
        if step == plan.settle_kill_at_step:
            self.settle()
            self.events.emit("kill", step=step, how="after settling")
            sigkill_self()
        if self.steps_here == plan.exit_after_steps:
            self.events.emit("exit", step=step)
            os._exit(0)
        if step == plan.unavailable_at_step and not self._raised:
            self._raised = True
            self.events.emit("unavailable", step=step)
            raise tf.errors.UnavailableError(None, None, "Socket closed (injected)")

    def timed_save(self, step: int, save: Callable[[], Any]) -> Any:
        """Run one save call: time how long it blocks, maybe kill inside it."""
        kill_here = (
            self._kill_armed
            and self.plan.kill_in_save_from_step is not None
            and step >= self.plan.kill_in_save_from_step
        )
        if kill_here:
            self._kill_armed = False
            self.events.emit("kill", step=step, how="during save")
            threading.Timer(self.plan.kill_delay, sigkill_self).start()
        started = time.perf_counter()
        result = save()
        self.events.emit(
            "save", step=step, block_s=round(time.perf_counter() - started, 5)
        )
        return result

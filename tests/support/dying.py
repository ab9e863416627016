"""How a worker process dies for real: SIGKILL at a chosen step."""

from __future__ import annotations

import os
import signal


def kill_if_at(step: int, kill_at: int | None) -> None:
    """SIGKILL this process right now if ``step`` is ``kill_at``: no cleanup.

    Call it from a step hook (``agent.on_step``), which runs after the
    agent's duties of the step, so a kill at a save step lands while that
    checkpoint uploads. Prints ``KILLING at step N`` first: tests read it to
    know the kill landed during training.
    """
    if kill_at is not None and step == kill_at:
        print(f"KILLING at step {step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

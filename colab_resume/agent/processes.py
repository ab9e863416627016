"""The outer loop's one seam for "this run has several processes".

:class:`~colab_resume.agent.loop.RunLoop` is the same loop for one process
or many; what differs is asked of a :class:`Processes`: how the run is
taken (the lease, and who holds it), what guards training (SIGTERM, the
cloud's preemption notices), whether the restored step and the step-end
decisions must be agreed, and what an error or the end means. A single
process is :class:`OneProcess`, here; a multi-process run is
:class:`~colab_resume.agent.multihost.MultiHost`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from colab_resume.agent.controls import Controls
from colab_resume.agent.driver import Driver
from colab_resume.agent.options import AgentOptions
from colab_resume.backend.numpy_batches import epoch_batches
from colab_resume.checkpoint import CheckpointManager
from colab_resume.checkpoint.formats.portable import NotPortableError, portable_groups
from colab_resume.checkpoint.groups import describe
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession
from colab_resume.launch import notices
from colab_resume.runtime import Connection
from colab_resume.storage import Storage

log = logging.getLogger(__name__)

StopAt = Callable[[int], bool]
Agree = Callable[[int, int], "int | None"]


class Processes(Protocol):
    """What the outer loop asks of the run's processes (see the module docstring)."""

    @property
    def leads(self) -> bool:
        """This process owns the run (its session is the run's)."""
        ...

    def take_run(
        self,
        storage: Storage,
        options: AgentOptions,
        events: EventLog,
        countdown: Callable[..., Any],
        connection: Connection | None,
    ) -> tuple[Any, CheckpointManager]:
        """This process's session (the lease, or its stand-in) and checkpoints."""
        ...

    def guarding(
        self, options: AgentOptions, controls: Controls, events: EventLog
    ) -> contextlib.AbstractContextManager[None]:
        """What turns SIGTERM and preemption notices into a clean stop."""
        ...

    def agree_start(self, step: int, driver: Driver) -> None:
        """Check every process has ``driver``'s plan (:func:`plan_of`) alike
        and restored ``step``."""
        ...

    def step_agreement(self) -> tuple[StopAt | None, Agree | None]:
        """The step duties' ``stop_at`` and ``agree`` (None: nothing to agree)."""
        ...

    def after_error(self, exc: BaseException) -> None:
        """Training ended on ``exc``; may end the process (a lost peer)."""
        ...

    def ended(self, stopped: bool) -> None:
        """The drive ended after its final commit (``stopped``: before its end)."""
        ...


class OneProcess:
    """A single-process run: the lease is its own, SIGTERM asks for a clean stop."""

    leads = True

    def take_run(
        self,
        storage: Storage,
        options: AgentOptions,
        events: EventLog,
        countdown: Callable[..., Any],
        connection: Connection | None,
    ) -> tuple[Any, CheckpointManager]:
        session = RunSession.open(
            storage, options.session, events=events, on_countdown=countdown
        )
        session.update(accelerator=connection.label if connection else None)
        manager = CheckpointManager(
            storage,
            lease=session.lease,
            fence=session.fence,
            events=events,
            config=dataclasses.replace(
                options.checkpoints,
                io_device=connection.io_device if connection else None,
            ),
        )
        return session, manager

    @contextlib.contextmanager
    def guarding(
        self, options: AgentOptions, controls: Controls, events: EventLog
    ) -> Iterator[None]:
        with (
            graceful_sigterm(controls),
            notices.watching(options.preemption_notices, controls, events),
        ):
            yield

    def agree_start(self, step: int, driver: Driver) -> None:
        """Nothing to agree with."""

    def step_agreement(self) -> tuple[StopAt | None, Agree | None]:
        return None, None

    def after_error(self, exc: BaseException) -> None:
        """The error is the caller's to raise."""

    def ended(self, stopped: bool) -> None:
        """Nothing beyond the session's own end."""


ONE_PROCESS = OneProcess()


def first_batch_of(driver: Driver) -> dict[str, str]:
    """The shapes of ``make_dataset(0)``'s first batch, as a plan entry (none
    where it cannot be read: training reports that itself)."""
    make = getattr(driver, "make_dataset", None)
    if make is None:
        return {}
    try:
        batch = next(epoch_batches(make, 0, skip=0, steps_per_epoch=1), None)
    except Exception:  # the dataset's own error comes when training reads it
        return {}
    if batch is None:
        return {}
    return {"the first batch's shapes": _shapes(batch)}


def _shapes(batch: Any) -> str:
    if isinstance(batch, dict):
        parts = ", ".join(f"{k}: {_shapes(v)}" for k, v in sorted(batch.items()))
        return "{" + parts + "}"
    if isinstance(batch, (list, tuple)):
        return "(" + ", ".join(_shapes(part) for part in batch) + ")"
    shape = getattr(batch, "shape", None)
    dtype = getattr(batch, "dtype", None)
    return f"{list(shape)} {dtype}" if shape is not None else type(batch).__name__


def plan_of(driver: Driver) -> dict[str, str]:
    """What every process of one run must train alike: its length, its model.

    The model as its variables' names, shapes and dtypes (a digest of them,
    and their count and size to read); empty where the state is not plain
    variables (an opaque TensorFlow trackable: JAX never has one).
    """
    plan = {
        "the steps to train (epochs x steps_per_epoch)": str(driver.total_steps),
        "steps_per_epoch": str(driver.steps_per_epoch or 0),
    }
    try:
        groups = portable_groups(driver.state)
    except NotPortableError:
        return plan
    described = [[group, *describe(v)] for group, vs in groups.items() for v in vs]
    size = sum(math.prod(shape) for _, _, shape, _ in described)
    digest = hashlib.sha256(json.dumps(described).encode()).hexdigest()[:12]
    plan["the model's variables"] = (
        f"{len(described)} variables, {size:,} values (digest {digest})"
    )
    return plan


@contextlib.contextmanager
def graceful_sigterm(controls: Controls) -> Iterator[None]:
    """SIGTERM asks for a clean stop (checkpoint first) instead of killing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        log.warning("SIGTERM: checkpointing and stopping at the next step")
        controls.preempt("SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

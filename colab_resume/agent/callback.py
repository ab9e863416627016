"""The lighter path: ``agent.restore(model)`` + ``agent.callback()`` in your ``fit``.

For people who keep calling ``model.fit`` themselves::

    with strategy.scope():
        model = build_model()
    start = agent.restore(model, epochs=10)  # takes the run, loads the checkpoint
    model.fit(dataset, epochs=10, initial_epoch=start.initial_epoch,
              callbacks=[agent.callback()])

Training may take several ``model.fit`` calls (a frozen base, then
fine-tuning), each with its own ``agent.callback()``: ``epochs`` given to
``restore`` is the whole run's, and the run is completed (``DONE.json``)
only when a ``fit`` ends that epoch. A ``fit`` that ends earlier leaves a
checkpoint and the session beating, ready for the next one. Without
``epochs`` the first ``fit`` that returns normally completes the run.

You get the run directory's checkpoints (async upload, commit, fallback,
retention), heartbeats, fencing and DONE.json. You do not get in-session
recovery, nor exact mid-epoch resume unless you ask for it: ``fit``
restarts the interrupted epoch from its first batch unless your dataset
skips ``start.skip`` batches of it and that ``fit`` runs the epoch's
remaining ``steps_per_epoch - start.skip`` batches. :meth:`Agent.fit` does
all of that for you.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from colab_resume import backend
from colab_resume.agent.driver import Snapshot
from colab_resume.agent.steps import StepDuties
from colab_resume.agent.values import scalars
from colab_resume.checkpoint import RestoredInfo


@dataclasses.dataclass(frozen=True)
class StartPoint:
    """Where a restored model stands.

    Attributes:
        step: global steps already trained.
        initial_epoch: pass to ``model.fit(initial_epoch=...)``.
        skip: batches of ``initial_epoch`` already trained (skip them for an
            exact resume).
    """

    step: int
    initial_epoch: int
    skip: int


class ModelState:
    """The driver behind the callbacks: one user-built model, saved whole.

    Args:
        model: the user's compiled model.
        epochs: the whole run's epochs, over every ``fit`` (None: the end of
            the first ``fit`` that returns normally).
        steps_per_epoch: batches of a whole epoch (None: learnt from the
            checkpoint, else from the first ``fit``).
    """

    def __init__(
        self, model: Any, epochs: int | None = None, steps_per_epoch: int | None = None
    ) -> None:
        self.model = model
        self.epochs = epochs
        self.epoch = 0
        self.steps_per_epoch = steps_per_epoch
        self.epochs_done = 0  # whole epochs trained, as of the last epoch end
        self.last_logs: dict[str, Any] = {}

    # --- the driver protocol: the user builds and trains, we only save ------------

    @property
    def total_steps(self) -> int | None:
        if self.epochs is None or self.steps_per_epoch is None:
            return None
        return self.epochs * self.steps_per_epoch

    @property
    def state(self) -> Any:
        return self.model

    def build(self) -> None:
        """Nothing: the user built the model in their strategy scope."""

    def restored(self, info: RestoredInfo | None) -> int:
        return info.step if info else 0

    def train(self, start_step: int, duties: StepDuties, strategy: Any) -> None:
        raise NotImplementedError("the lighter path trains in the user's model.fit")

    def metrics(self) -> dict[str, Any]:
        return scalars(self.last_logs)

    def snapshot(self) -> Snapshot:
        backend.current().sync_fit_state(self.model)  # saved from inside the user's fit
        extras = {"steps_per_epoch": self.steps_per_epoch}
        return Snapshot(self.model, self.epoch, self.metrics(), extras)

    def start_point(self, step: int, epoch: int, extras: dict[str, Any]) -> StartPoint:
        saved = extras.get("steps_per_epoch")
        if self.steps_per_epoch is None and _positive_int(saved):
            self.steps_per_epoch = saved
        steps = self.steps_per_epoch
        if steps is None or step == 0:
            self.epochs_done = epoch
            return StartPoint(step=step, initial_epoch=epoch, skip=0)
        epoch, skip = divmod(step, steps)
        self.epochs_done = epoch
        return StartPoint(step=step, initial_epoch=epoch, skip=skip)

    def begin_fit(self, fit_steps: int | None) -> int:
        """A ``fit`` of ``fit_steps`` batches an epoch starts; its batch offset.

        A ``fit`` shorter than a whole epoch runs the tail of a resumed one
        (its first ``start.skip`` batches were trained before): its batches
        are numbered from that offset, so the steps — and the checkpoints
        named after them — continue where the run stood.
        """
        if self.steps_per_epoch is None:
            self.steps_per_epoch = fit_steps
        whole = self.steps_per_epoch
        if not fit_steps or not whole or fit_steps >= whole:
            return 0
        return whole - fit_steps

    def step_of(self, epoch: int, offset: int, batch: int) -> int:
        return epoch * (self.steps_per_epoch or 0) + offset + batch + 1

    @property
    def planned_end_reached(self) -> bool:
        return self.epochs is None or self.epochs_done >= self.epochs


def make_callback(
    driver: ModelState,
    duties: StepDuties,
    finish: Callable[[], None],
    pause_between: Callable[[], None],
    abort: Callable[[str], None],
) -> Any:
    """A :class:`ResumeCallback <resume_callback_class>` doing the agent's duties.

    Args:
        driver: the lighter path's state, shared by every ``fit``'s callback.
        duties: the agent's per-step duties.
        finish: the run ended (planned end, or a stop): close the session.
        pause_between: a ``fit`` ended before the planned end.
        abort: ``fit`` left without ``on_train_end`` (it raised); the reason.
    """
    return resume_callback_class()(driver, duties, finish, pause_between, abort)


def resume_callback_class() -> type:
    """``ResumeCallback``, the Keras callback ``agent.callback()`` returns.

    Its module (:mod:`colab_resume.agent.resume_callback`) imports Keras at
    the top, so it is imported on first use: importing colab_resume never
    imports Keras. ``colab_resume.ResumeCallback`` is this class (for
    ``isinstance``).
    """
    from colab_resume.agent.resume_callback import ResumeCallback

    return ResumeCallback


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1

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
import functools
import logging
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from colab_resume import backend
from colab_resume.agent.driver import Snapshot
from colab_resume.agent.steps import StepDuties
from colab_resume.agent.values import scalars
from colab_resume.checkpoint import RestoredInfo

log = logging.getLogger(__name__)


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


@functools.cache
def resume_callback_class() -> type:
    """``ResumeCallback``, the Keras callback ``agent.callback()`` returns.

    Built on first use, so that importing colab_resume never imports Keras;
    ``colab_resume.ResumeCallback`` is this class (for ``isinstance``).
    """
    import keras

    class ResumeCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras
        """Checkpoints, heartbeats and fencing for your own ``model.fit``.

        Get one from ``agent.callback()`` for each ``fit``. When ``fit``
        raises, the session it serves is closed as failed (Keras calls no
        callback then, so a watch notices ``fit`` is gone).
        """

        def __init__(
            self,
            driver: ModelState,
            duties: StepDuties,
            finish: Callable[[], None],
            pause_between: Callable[[], None],
            abort: Callable[[str], None],
        ) -> None:
            super().__init__()
            self._driver, self._duties = driver, duties
            self._finish, self._pause_between, self._abort = (
                finish,
                pause_between,
                abort,
            )
            self.offset = 0
            self.watch: _FitWatch | None = None

        def on_train_begin(self, logs: Any = None) -> None:
            self.offset = self._driver.begin_fit(self.params.get("steps"))
            self.watch = _FitWatch.start(self.model, self._abort)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._driver.epoch = epoch

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self._duties.before_step()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            driver = self._driver
            driver.last_logs = dict(logs or {})
            step = driver.step_of(driver.epoch, self.offset, batch)
            if step >= (driver.epoch + 1) * (driver.steps_per_epoch or 0):
                driver.epochs_done = max(driver.epochs_done, driver.epoch + 1)
            if self._duties.after_step(step):
                self.model.stop_training = True

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.offset = 0  # only a resumed epoch's tail is offset

        def on_train_end(self, logs: Any = None) -> None:
            if self.watch is not None:
                self.watch.done()
            if self._duties.controls.stop_requested or self._driver.planned_end_reached:
                self._finish()  # completed, unless stop() was asked
            else:
                self._pause_between()

    ResumeCallback.__module__ = __name__
    ResumeCallback.__qualname__ = "ResumeCallback"
    return ResumeCallback


class _FitWatch:
    """Notices a ``model.fit`` that raised: Keras then calls no callback.

    Keras has no hook for an exception inside ``fit``, and in a notebook the
    process lives on, so the session would go on beating ``training`` for a
    run nobody trains (and refuse the next cell's session as live). A
    daemon thread checks twice a second that ``fit``'s frame is still on
    the training thread's stack; once it is gone without ``on_train_end``,
    ``abort`` closes the session as failed.
    """

    POLL_SECONDS = 0.5

    def __init__(self, frame: FrameType, thread_id: int, abort: Callable[[str], None]):
        self._frame: FrameType | None = frame
        self._thread_id = thread_id
        self._abort = abort
        self._done = threading.Event()

    @classmethod
    def start(cls, model: Any, abort: Callable[[str], None]) -> _FitWatch | None:
        frame = _fit_frame(model)
        if frame is None:
            log.debug("lighter path: model.fit's frame not found; not watched")
            return None
        watch = cls(frame, threading.get_ident(), abort)
        threading.Thread(
            target=watch._run, name="colab-resume-fit-watch", daemon=True
        ).start()
        return watch

    def done(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(self.POLL_SECONDS):
            if not self._fit_running():
                self._frame = None  # let fit's locals go
                if not self._done.is_set():
                    self._abort("model.fit raised (it ended without on_train_end)")
                return
        self._frame = None

    def _fit_running(self) -> bool:
        frame = sys._current_frames().get(self._thread_id)
        while frame is not None:
            if frame is self._frame:
                return True
            frame = frame.f_back
        return False


def _fit_frame(model: Any) -> FrameType | None:
    """The frame of the ``model.fit`` call delivering ``on_train_begin``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "fit" and frame.f_locals.get("self") is model:
            return frame
        frame = frame.f_back
    return None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1

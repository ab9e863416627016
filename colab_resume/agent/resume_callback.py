"""The lighter path's Keras callback (``agent.callback()``): Keras at the top.

Imported on first use (:func:`colab_resume.agent.callback.resume_callback_class`,
``cr.ResumeCallback``), so importing colab_resume imports no Keras: Keras'
own pattern, a module that imports its framework at the top and is imported
once it is chosen. It sees the lighter path's driver through
:class:`LightDriver` and imports nothing of it.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

import keras

from colab_resume.agent.steps import StepDuties

log = logging.getLogger(__name__)


class LightDriver(Protocol):
    """What the callback reads and sets of the lighter path's
    :class:`~colab_resume.agent.callback.ModelState`."""

    epoch: int
    epochs_done: int
    steps_per_epoch: int | None
    last_logs: dict[str, Any]

    def begin_fit(self, fit_steps: int | None) -> int: ...

    def step_of(self, epoch: int, offset: int, batch: int) -> int: ...

    @property
    def planned_end_reached(self) -> bool: ...


class ResumeCallback(keras.callbacks.Callback):  # type: ignore[misc]  # untyped keras
    """Checkpoints, heartbeats and fencing for your own ``model.fit``.

    Get one from ``agent.callback()`` for each ``fit``. When ``fit``
    raises, the session it serves is closed as failed (Keras calls no
    callback then, so a watch notices ``fit`` is gone).
    """

    def __init__(
        self,
        driver: LightDriver,
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

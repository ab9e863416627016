"""The lighter path: ``agent.restore(model)`` + ``agent.callback()`` in your ``fit``.

For people who keep calling ``model.fit`` themselves::

    with strategy.scope():
        model = build_model()
    start = agent.restore(model)     # takes the run, loads the newest checkpoint
    model.fit(dataset, epochs=10, initial_epoch=start.initial_epoch,
              callbacks=[agent.callback()])

You get the run directory's checkpoints (async upload, commit, fallback,
retention), heartbeats, fencing and DONE.json. You do not get in-session
recovery, nor exact mid-epoch resume: ``fit`` restarts the interrupted
epoch from its first batch unless your dataset skips ``start.skip``
batches of that epoch. :meth:`Agent.fit` does all of that for you.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from colab_resume.agent.steps import StepDuties
from colab_resume.agent.values import scalars


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
    """The driver behind the callback: one user-built model, saved whole."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.epoch = 0
        self.steps_per_epoch: int | None = None
        self.last_logs: dict[str, Any] = {}

    @property
    def state(self) -> Any:
        return self.model

    def snapshot(self) -> tuple[Any, int, dict[str, Any], dict[str, Any]]:
        extras = {"steps_per_epoch": self.steps_per_epoch}
        return self.model, self.epoch, scalars(self.last_logs), extras

    def start_point(self, step: int, epoch: int, extras: dict[str, Any]) -> StartPoint:
        steps = extras.get("steps_per_epoch")
        if not isinstance(steps, int) or steps < 1 or step == 0:
            return StartPoint(step=step, initial_epoch=epoch, skip=0)
        epoch, skip = divmod(step, steps)
        return StartPoint(step=step, initial_epoch=epoch, skip=skip)


def make_callback(driver: ModelState, duties: StepDuties, finish: Any) -> Any:
    """A Keras callback doing the agent's duties after every batch."""
    import keras

    class ColabResumeCallback(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            driver.epoch = epoch
            driver.steps_per_epoch = self.params.get("steps")

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            duties.before_step()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            steps = self.params.get("steps") or 0
            driver.last_logs = dict(logs or {})
            if duties.after_step(driver.epoch * steps + batch + 1):
                self.model.stop_training = True

        def on_train_end(self, logs: Any = None) -> None:
            finish()  # fit returned normally: completed, unless stop() was asked

    return ColabResumeCallback()

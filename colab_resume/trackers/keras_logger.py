"""The Keras callback that logs to a tracker at the run's step: Keras at the top.

Imported by the trackers only when a callback is made
(``mlflow_run(...).callback()``, ``wandb_run(...).callback()``), so
importing colab_resume imports no Keras. The logic is
:class:`~colab_resume.trackers.logger.StepLog`, free of Keras.
"""

from __future__ import annotations

from typing import Any

import keras

from colab_resume.trackers.logger import Sink, StepLog


class TrackerLogger(keras.callbacks.Callback):  # type: ignore[misc]  # untyped keras
    """Logs the Keras logs to a tracker at the run's step; see
    :mod:`colab_resume.trackers.logger`."""

    def __init__(self, sink: Sink, update_freq: str | int = "epoch") -> None:
        super().__init__()
        self.log = StepLog(sink, update_freq)

    def on_train_begin(self, logs: Any = None) -> None:
        self.log.start(0)

    def get_resume_state(self) -> dict[str, Any]:
        return {"step": self.log.step}

    def set_resume_state(self, state: dict[str, Any]) -> None:
        self.log.start(int(state["step"]))

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.log.batch_end(logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.log.epoch_end(epoch, logs)

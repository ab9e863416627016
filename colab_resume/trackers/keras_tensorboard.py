"""Keras' TensorBoard callback continued across sessions: Keras at the top.

Imported on first use (:func:`~colab_resume.trackers.tensorboard_log.tensorboard`),
so importing colab_resume imports no Keras. It marks where a session
starts through :class:`Marks`
(:class:`~colab_resume.trackers.tensorboard_log.RestartMarks`) and imports
nothing of that module.
"""

from __future__ import annotations

from typing import Any, Protocol

import keras

# The base class's own methods, called past this class's overrides.
base = keras.callbacks.TensorBoard


class Marks(Protocol):
    """Where the restart marks go (one ``START`` event file a session)."""

    def before_writer(self, folder: str, step: int) -> str:
        """Mark ``step`` in ``folder`` before its writer opens; the file name."""
        ...

    def before_newest(self, folder: str, step: int) -> str | None:
        """Mark ``step`` just before ``folder``'s newest file (None: no file)."""
        ...


class ContinuedTensorBoard(keras.callbacks.TensorBoard):  # type: ignore[misc]  # untyped keras
    """``keras.callbacks.TensorBoard`` that continues one log across sessions.

    At the start of training and at every resume it marks the step the
    session starts at, before the session's first summary, so that
    TensorBoard drops what an earlier session logged from that step on
    (those steps are trained again). Epoch summaries use the run's step.
    """

    def __init__(self, log_dir: str, marks: Marks, **kwargs: Any) -> None:
        super().__init__(log_dir=log_dir, **kwargs)
        self._marks = marks
        # The step this session trains on from (None: not known yet), and
        # the run folders not yet marked since it became known.
        self._restart_at: int | None = None
        self._pending: set[str] = set()
        self._summary_due = False
        self.restart_files: list[str] = []

    # --- where a session starts ---------------------------------------------

    def _session_starts(self, step: int) -> None:
        self._restart_at = step
        self._pending = {"train", "validation"}
        if self._summary_due:  # held back until the train folder is marked
            self._summary_due = False
            base._write_keras_model_summary(self)

    def on_train_begin(self, logs: Any = None) -> None:
        self._session_starts(0)
        super().on_train_begin(logs)

    def get_resume_state(self) -> dict[str, Any]:
        return {
            "train_batch": int(self._global_train_batch),
            "test_batch": int(self._global_test_batch),
        }

    def set_resume_state(self, state: dict[str, Any]) -> None:
        """Continue at the checkpoint's step (instead of ``on_train_begin``)."""
        self._session_starts(int(state["train_batch"]))
        if self._prev_summary_state:  # in-session recovery: ours is pushed
            self._pop_writer()
        base.on_train_begin(self)  # opens the writer; counters from state:
        self._pop_writer()
        self._global_train_batch = int(state["train_batch"])
        self._global_test_batch = int(state["test_batch"])
        self._push_writer(self._train_writer, self._global_train_batch)

    def _write_keras_model_summary(self) -> None:
        # set_model writes it before the session's step is known: opening
        # the writer then would leave no room for the mark before its file.
        if self._restart_at is None:
            self._summary_due = True
        else:
            super()._write_keras_model_summary()

    # --- the writers: each folder marked before its first summary ------------

    def _writer(self, folder: str, key: str, open_writer: Any) -> Any:
        marking = self._restart_at is not None and folder in self._pending
        if not marking:
            return open_writer(self)
        step = int(self._restart_at or 0) + 1  # the first step logged now
        if key not in self._writers:
            name: str | None = self._marks.before_writer(folder, step)
            writer = open_writer(self)
        else:  # opened before the step was known (an in-session recovery)
            writer = open_writer(self)
            writer.flush()
            name = self._marks.before_newest(folder, step)
        if name is not None:
            self._pending.discard(folder)
            self.restart_files.append(f"{folder}/{name}")
        return writer

    @property
    def _train_writer(self) -> Any:
        return self._writer("train", "train", base._train_writer.fget)

    @property
    def _val_writer(self) -> Any:
        return self._writer("validation", "val", base._val_writer.fget)

    # --- one step axis ------------------------------------------------------

    def _log_epoch_metrics(self, epoch: int, logs: Any) -> None:
        super()._log_epoch_metrics(self._global_train_batch, logs)

    def _log_weights(self, epoch: int) -> None:
        super()._log_weights(self._global_train_batch)

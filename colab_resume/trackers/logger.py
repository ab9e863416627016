"""Logging to a tracker at the run's step, once per step: the logic, free of Keras.

A tracker that keeps a run's history (MLflow, W&B) receives from this
callback the Keras logs at the run's global step: the step counter travels
in every checkpoint (``get_resume_state``), so a resumed session goes on
from the checkpoint's step instead of 0. A session killed after its last
checkpoint has already logged some steps the next session trains again;
neither MLflow nor W&B can take a logged point back, so at every start the
callback asks the tracker how far each metric was logged and leaves out
the steps already there (the agent resumes exactly: the values a second
time would be the same numbers), and has the tracker mark the step the
session resumed at.

The Keras callback around it is
:class:`~colab_resume.trackers.keras_logger.TrackerLogger`, in a module
that imports Keras at the top and is imported only when a callback is
made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from colab_resume.exit_status import Preempted

# The metric names: batch logs and epoch logs apart, as Keras' TensorBoard
# callback keeps them (batch_loss, epoch_loss).
BATCH, EPOCH = "batch/", "epoch/"
# A key in ``logged_through`` that stands for every metric (a tracker with
# one step for the whole row, as W&B).
EVERY_METRIC = "*"


class Sink(Protocol):
    """What the callback needs from one tracker's run."""

    def logged_through(self) -> dict[str, int]:
        """The last step already logged, by metric name (``"*"``: any metric)."""
        ...

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Log ``metrics`` at ``step``."""
        ...

    def resumed(self, step: int, logged_through: int | None) -> None:
        """Mark that this session trains on from ``step``; the steps up to
        ``logged_through`` were logged by an earlier session."""
        ...


def _numbers(logs: Mapping[str, Any] | None, prefix: str) -> dict[str, float]:
    found = {}
    for name, value in (logs or {}).items():
        try:
            found[prefix + name] = float(value)
        except (TypeError, ValueError):  # a non-scalar log: not a metric
            continue
    return found


class StepLog:
    """The logic of the callback, free of Keras (the tests drive it directly).

    Args:
        sink: the tracker's run.
        update_freq: ``"epoch"`` (the epoch's logs at its last step), or an
            int N: also the running batch logs every N steps.
    """

    def __init__(self, sink: Sink, update_freq: str | int = "epoch") -> None:
        if update_freq != "epoch" and not (
            isinstance(update_freq, int) and not isinstance(update_freq, bool)
        ):
            raise ValueError(
                f"update_freq must be 'epoch' or a number of steps, got {update_freq!r}"
            )
        if isinstance(update_freq, int) and update_freq < 1:
            raise ValueError(f"update_freq must be >= 1, got {update_freq}")
        self.sink = sink
        self.update_freq = update_freq
        self.step = 0
        self._through: dict[str, int] = {}

    def start(self, step: int) -> None:
        """A session (or an in-session recovery) trains on from ``step``."""
        self.step = step
        self._through = dict(self.sink.logged_through())
        last = max(self._through.values(), default=None)
        if step > 0 or (last is not None and last > step):
            self.sink.resumed(step, last)

    def _already(self, name: str, step: int) -> bool:
        through = self._through.get(name, self._through.get(EVERY_METRIC))
        return through is not None and step <= through

    def _log(self, metrics: dict[str, float]) -> None:
        fresh = {k: v for k, v in metrics.items() if not self._already(k, self.step)}
        if fresh:
            self.sink.log(fresh, self.step)

    def batch_end(self, logs: Mapping[str, Any] | None) -> None:
        self.step += 1
        if self.update_freq != "epoch" and self.step % int(self.update_freq) == 0:
            self._log(_numbers(logs, BATCH))

    def epoch_end(self, epoch: int, logs: Mapping[str, Any] | None) -> None:
        self._log({**_numbers(logs, EPOCH), "epoch": float(epoch)})


def require(module: str, pip: str) -> Any:
    """Import the tracker's package, or say which pip line installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"colab_resume.trackers needs {module} for this, and it is not "
            f"installed: pip install {pip}"
        ) from exc


def failed(exc: BaseException | None) -> bool:
    """Whether a tracker's block ended on a failure: an error, not a stop
    on purpose (a preemption's clean exit, Ctrl-C) and not a normal end."""
    return exc is not None and not isinstance(exc, (Preempted, KeyboardInterrupt))

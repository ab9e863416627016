"""The Keras callbacks ``agent.fit`` trains through: Keras imported at the top.

Imported by :mod:`colab_resume.agent.keras_fit` only when ``agent.fit``
trains, so importing the package still imports no Keras (Keras' own
pattern: a backend's trainer module imports its framework at the top and
is imported once that backend is chosen). The classes see the driver
through :class:`FitDriver`, what they use of
:class:`~colab_resume.agent.keras_fit.KerasFit`, and import nothing of it.
"""

from __future__ import annotations

from typing import Any, Protocol

import keras

from colab_resume.agent.steps import StepDuties


class FitDriver(Protocol):
    """What the hooks read and set of ``agent.fit``'s driver."""

    epochs: int
    steps_per_epoch: int
    epoch: int
    skip: int
    step: int
    last_logs: dict[str, Any]
    user_callbacks: list[Any]
    resumed_from: str
    said_resumed: bool

    def begin_callbacks(self, users: Any, logs: Any) -> None: ...

    def enter_epoch(self, epoch: int) -> None: ...

    def resume_epoch(self) -> None: ...

    def record_epoch(self, epoch: int, logs: dict[str, Any] | None) -> None: ...

    def start_random_op_watch(self) -> None: ...

    def end_random_op_watch(self) -> None: ...


class AgentHook(keras.callbacks.Callback):  # type: ignore[misc]  # untyped keras
    """The one callback of every ``fit`` call the agent makes: it runs the
    per-step duties and forwards to the user's callbacks as one whole run.

    Args:
        driver: ``agent.fit``'s driver.
        duties: the per-step duties (saves, beats, controls).
        users: the user's callbacks, one ``CallbackList`` shared by the hooks
            of every recovery so that begin and end stay paired.
    """

    def __init__(self, driver: FitDriver, duties: StepDuties, users: Any) -> None:
        super().__init__()
        self.driver = driver
        self.duties = duties
        self.users = users

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self.users.set_model(model)

    def set_params(self, params: dict[str, Any]) -> None:
        # The user's callbacks see the whole run, not this one-epoch fit().
        d = self.driver
        params = dict(params, epochs=d.epochs, steps=d.steps_per_epoch)
        super().set_params(params)
        self.users.set_params(params)

    def on_train_begin(self, logs: Any = None) -> None:
        self.driver.begin_callbacks(self.users, logs)

    def on_train_end(self, logs: Any = None) -> None:
        self.last_train_logs = logs  # delivered once, by finish()

    def finish(self) -> None:
        self.users.on_train_end(getattr(self, "last_train_logs", None))

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.driver.enter_epoch(epoch)
        if self.driver.skip:
            # Resumed mid-epoch: this epoch began before the checkpoint.
            self.driver.resume_epoch()
        else:
            self.users.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        d, duties = self.driver, self.duties
        step = (epoch + 1) * d.steps_per_epoch
        if duties.step == step:  # the epoch ran to its end
            d.record_epoch(epoch, logs)
        self.users.on_epoch_end(epoch, logs)
        if duties.step == step and duties.after_step(step):
            self.model.stop_training = True

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.duties.before_step()
        self.users.on_train_batch_begin(batch + self.driver.skip, logs)
        self.driver.start_random_op_watch()  # once: the first step is traced

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        d, duties = self.driver, self.duties
        d.end_random_op_watch()
        step = d.epoch * d.steps_per_epoch + d.skip + batch + 1
        d.last_logs = dict(logs or {})
        duties.step = d.step = step
        # After an epoch's last batch the step is complete only once the
        # epoch's end (validation, History, on_epoch_end) is: a Ctrl-C in
        # between must not save it, or that epoch would never be recorded.
        duties.consistent = bool(step % d.steps_per_epoch)
        self.users.on_train_batch_end(batch + d.skip, logs)
        # The epoch's last step is handled in on_epoch_end, once its logs
        # are in the history the checkpoint carries.
        if step % d.steps_per_epoch and duties.after_step(step):
            self.model.stop_training = True

    def on_test_begin(self, logs: Any = None) -> None:
        self.users.on_test_begin(logs)

    def on_test_end(self, logs: Any = None) -> None:
        self.users.on_test_end(logs)

    def on_test_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.users.on_test_batch_begin(batch, logs)

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        self.users.on_test_batch_end(batch, logs)


def user_callbacks(callbacks: list[Any]) -> Any:
    """The user's callbacks as one ``CallbackList`` (no History, no bar)."""
    return keras.callbacks.CallbackList(callbacks, add_history=False, add_progbar=False)


class RunProgbar(keras.callbacks.ProgbarLogger):  # type: ignore[misc]  # untyped keras
    """Keras' progress bar, told about the whole run rather than one-epoch fits.

    Given in ``callbacks``, it replaces the one ``fit`` would add, which would
    print no "Epoch i/N" line (each call sees ``epochs=epoch + 1``) and a bar
    that ends early on a resumed, partial epoch.

    Args:
        driver: ``agent.fit``'s driver.
    """

    def __init__(self, driver: FitDriver) -> None:
        super().__init__()
        self.driver = driver

    def set_params(self, params: dict[str, Any]) -> None:
        d = self.driver
        params = dict(params, epochs=d.epochs, steps=d.steps_per_epoch)
        super().set_params(params)

    def on_train_begin(self, logs: Any = None) -> None:
        super().on_train_begin(logs)
        d = self.driver
        if d.resumed_from and not d.said_resumed:
            d.said_resumed = True  # once per call, above the bars
            print(d.resumed_from, flush=True)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        super().on_epoch_begin(epoch, logs)
        if self.driver.skip:
            self.progbar.update(self.driver.skip)  # resumed mid-epoch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        super().on_train_batch_end(batch + self.driver.skip, logs)

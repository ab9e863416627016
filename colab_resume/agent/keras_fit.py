"""``agent.fit``: Keras ``fit`` that can start in the middle of an epoch.

Keras cannot resume mid-epoch (``BackupAndRestore`` in Keras 3 redoes the
interrupted epoch), so the agent calls ``model.fit`` once per epoch, on that
epoch's dataset positioned at the resumed step, with ``initial_epoch`` set.
One forwarding callback sits between Keras and the user's callbacks: it
delivers ``on_train_begin`` / ``on_train_end`` once per run rather than once
per epoch (``EarlyStopping`` and friends reset themselves there), gives them
the run's real epoch count and batch numbers, keeps the run's History across
restarts, and does the agent's duties after every step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from colab_resume.agent.steps import StepDuties
from colab_resume.agent.values import check_callable, scalars
from colab_resume.checkpoint import RestoredInfo
from colab_resume.data import (
    check_fingerprint,
    epoch_dataset,
    fingerprint,
    split_step,
)
from colab_resume.errors import ColabResumeError

log = logging.getLogger(__name__)


class ModelError(ColabResumeError, ValueError):
    """``build_model`` returned something the agent cannot train."""


class KerasFit:
    """Drives ``model.fit`` epoch by epoch for :meth:`Agent.fit`."""

    def __init__(
        self,
        build_model: Callable[[], Any],
        make_dataset: Callable[..., Any],
        *,
        epochs: int,
        steps_per_epoch: int,
        callbacks: Sequence[Any] | None,
        verbose: Any,
    ) -> None:
        check_callable("build_model", build_model)
        check_callable("make_dataset", make_dataset)
        for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}.")
        self.build_model = build_model
        self.make_dataset = make_dataset
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.user_callbacks = list(callbacks or [])
        self.verbose = verbose
        self.model: Any = None
        self.history = _new_history()
        self.fingerprints: dict[str, str] = {}
        self.epoch = 0
        self.skip = 0
        self.last_logs: dict[str, Any] = {}
        self._user_callbacks: Any = None  # one CallbackList for the whole call
        self._started_callbacks = False

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    # --- the driver protocol (see Agent._train) ---------------------------------------

    def build(self) -> None:
        """Call ``build_model()``; the agent has entered a fresh strategy scope."""
        import keras

        model = self.build_model()
        if not isinstance(model, keras.Model):
            raise ModelError(
                f"build_model() returned {type(model).__name__}; it must return a "
                f"keras.Model, built and compiled inside it."
            )
        if getattr(model, "optimizer", None) is None or not getattr(
            model, "compiled", True
        ):
            raise ModelError(
                "build_model() returned a model that is not compiled. Call "
                "model.compile(optimizer=..., loss=...) inside build_model, so the "
                "agent can rebuild it in a fresh strategy scope after a restart."
            )
        self.model = model

    @property
    def state(self) -> Any:
        return self.model

    def restored(self, info: RestoredInfo | None) -> int:
        """Take what the checkpoint carried; return the step to start from."""
        if info is None:
            return 0
        saved = info.extras.get("history") or {}
        self.history = _new_history(saved.get("epoch"), saved.get("history"))
        self.fingerprints = dict(info.extras.get("fingerprints") or {})
        self.last_logs = dict(info.metrics or {})
        return info.step

    def snapshot(self) -> tuple[Any, int, dict[str, Any], dict[str, Any]]:
        history = {"epoch": list(self.history.epoch), "history": self.history.history}
        extras = {"history": history, "fingerprints": self.fingerprints}
        return self.model, self.epoch, scalars(self.last_logs), extras

    def train(self, start_step: int, duties: StepDuties) -> None:
        """Train from ``start_step`` to the end (or until stopped)."""
        start_epoch, skip = split_step(start_step, self.steps_per_epoch)
        if start_step:
            self._check_data(start_epoch)
        hook = _make_hook(self, duties)
        callbacks = [hook] + ([_make_progbar(self)] if self.verbose != 0 else [])
        for epoch in range(start_epoch, self.epochs):
            self.epoch = epoch
            self.skip = skip if epoch == start_epoch else 0
            self._record_fingerprint(epoch)
            dataset = epoch_dataset(
                self.make_dataset,
                epoch,
                skip=self.skip,
                steps_per_epoch=self.steps_per_epoch,
            )
            self.model.fit(
                dataset,
                initial_epoch=epoch,
                epochs=epoch + 1,
                steps_per_epoch=self.steps_per_epoch - self.skip,
                callbacks=callbacks,
                verbose=self.verbose,
            )
            if self.model.stop_training:
                break
        hook.finish()

    # --- data determinism -------------------------------------------------------------

    def _first_batch_fingerprint(self, epoch: int) -> str:
        return fingerprint(
            epoch_dataset(self.make_dataset, epoch, skip=0, steps_per_epoch=1)
        )

    def _record_fingerprint(self, epoch: int) -> None:
        if str(epoch) not in self.fingerprints:
            self.fingerprints[str(epoch)] = self._first_batch_fingerprint(epoch)
            # Keep the manifest small: only the last few epochs matter.
            for old in sorted(self.fingerprints, key=int)[:-3]:
                del self.fingerprints[old]

    def _check_data(self, start_epoch: int) -> None:
        seen = [int(e) for e in self.fingerprints if int(e) <= start_epoch]
        if seen:
            epoch = max(seen)
            check_fingerprint(
                epoch,
                self.fingerprints[str(epoch)],
                self._first_batch_fingerprint(epoch),
            )

    # --- called by the hook -----------------------------------------------------------

    def record_epoch(self, epoch: int, logs: dict[str, Any] | None) -> None:
        self.history.epoch.append(epoch)
        for key, value in scalars(logs or {}).items():
            self.history.history.setdefault(key, []).append(value)


def _make_hook(driver: KerasFit, duties: StepDuties) -> Any:
    """The forwarding callback; built here so Keras is imported only when training."""
    import keras

    if driver._user_callbacks is None:
        # Shared by the hooks of every recovery, so begin/end stay paired.
        driver._user_callbacks = keras.callbacks.CallbackList(
            driver.user_callbacks, add_history=False, add_progbar=False
        )

    class AgentHook(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.users = driver._user_callbacks

        def set_model(self, model: Any) -> None:
            super().set_model(model)
            self.users.set_model(model)

        def set_params(self, params: dict[str, Any]) -> None:
            # The user's callbacks see the whole run, not this one-epoch fit().
            params = dict(params, epochs=driver.epochs, steps=driver.steps_per_epoch)
            super().set_params(params)
            self.users.set_params(params)

        def on_train_begin(self, logs: Any = None) -> None:
            if not driver._started_callbacks:
                driver._started_callbacks = True
                self.users.on_train_begin(logs)

        def on_train_end(self, logs: Any = None) -> None:
            self.last_train_logs = logs  # delivered once, by finish()

        def finish(self) -> None:
            self.users.on_train_end(getattr(self, "last_train_logs", None))

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.users.on_epoch_begin(epoch, logs)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            step = (epoch + 1) * driver.steps_per_epoch
            if duties.step == step:  # the epoch ran to its end
                driver.record_epoch(epoch, logs)
            self.users.on_epoch_end(epoch, logs)
            if duties.step == step and duties.after_step(step):
                self.model.stop_training = True

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            duties.before_step()
            self.users.on_train_batch_begin(batch + driver.skip, logs)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            step = driver.epoch * driver.steps_per_epoch + driver.skip + batch + 1
            driver.last_logs = dict(logs or {})
            duties.step = step
            duties.consistent = True
            self.users.on_train_batch_end(batch + driver.skip, logs)
            # The epoch's last step is handled in on_epoch_end, once its logs
            # are in the history the checkpoint carries.
            if step % driver.steps_per_epoch and duties.after_step(step):
                self.model.stop_training = True

        def on_test_begin(self, logs: Any = None) -> None:
            self.users.on_test_begin(logs)

        def on_test_end(self, logs: Any = None) -> None:
            self.users.on_test_end(logs)

        def on_test_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.users.on_test_batch_begin(batch, logs)

        def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
            self.users.on_test_batch_end(batch, logs)

    return AgentHook()


def _make_progbar(driver: KerasFit) -> Any:
    """Keras' progress bar, told about the whole run rather than one-epoch fits.

    Given in ``callbacks``, it replaces the one ``fit`` would add, which would
    print no "Epoch i/N" line (each call sees ``epochs=epoch + 1``) and a bar
    that ends early on a resumed, partial epoch.
    """
    import keras

    class RunProgbar(keras.callbacks.ProgbarLogger):
        def set_params(self, params: dict[str, Any]) -> None:
            params = dict(params, epochs=driver.epochs, steps=driver.steps_per_epoch)
            super().set_params(params)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            super().on_epoch_begin(epoch, logs)
            if driver.skip:
                self.progbar.update(driver.skip)  # resumed mid-epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            super().on_train_batch_end(batch + driver.skip, logs)

    return RunProgbar()


def _new_history(epochs: list[int] | None = None, values: dict | None = None) -> Any:
    import keras

    history = keras.callbacks.History()
    history.epoch = list(epochs or [])
    history.history = {k: list(v) for k, v in (values or {}).items()}
    return history

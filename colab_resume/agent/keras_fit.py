"""``agent.fit``: Keras ``fit`` that can start in the middle of an epoch.

Keras cannot resume mid-epoch (``BackupAndRestore`` in Keras 3 redoes the
interrupted epoch), so the agent calls ``model.fit`` on each epoch's own
dataset, the resumed epoch's positioned at the resumed step, with
``initial_epoch`` set; later epochs share a call where that is safe
(:mod:`~colab_resume.agent.spans`).
One forwarding callback sits between Keras and the user's callbacks: it
delivers ``on_train_begin`` / ``on_train_end`` once per run rather than once
per call (``EarlyStopping`` and friends reset themselves there), gives them
the run's real epoch count and batch numbers, keeps the run's History across
restarts, and does the agent's duties after every step.

Across a process death the user's model and callbacks see exactly what an
uninterrupted run shows them: the callbacks' state travels in the
checkpoint (:mod:`~colab_resume.agent.callback_state`) and is put back
instead of a second ``on_train_begin``; the interrupted epoch's
``on_epoch_begin`` is not delivered again (its effect, say a learning-rate
change, is in the checkpoint); its running metrics are put back after
Keras resets them (:mod:`~colab_resume.agent.metric_state`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from colab_resume import backend
from colab_resume.agent import callback_state, metric_state, spans
from colab_resume.agent.driver import Snapshot
from colab_resume.agent.epochs import epoch_dataset, split_step
from colab_resume.agent.fingerprints import DataFingerprints
from colab_resume.agent.proof import PositionProof
from colab_resume.agent.steps import StepDuties
from colab_resume.agent.trail import BatchTrail
from colab_resume.agent.values import check_callable, scalars
from colab_resume.backend import jax_distributed
from colab_resume.backend.random_ops import RandomOpWatch
from colab_resume.checkpoint import RestoredInfo
from colab_resume.checkpoint.groups import ModelAndExtras
from colab_resume.data.contract import accepts_skip
from colab_resume.data.cost import RebuildWatch
from colab_resume.data.grain import GrainPosition, is_grain
from colab_resume.errors import ColabResumeError
from colab_resume.events import EventLog
from colab_resume.validate import check_int

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
        validation_data: Any = None,
        validation_steps: int | None = None,
        validation_freq: int = 1,
        class_weight: dict[int, float] | None = None,
        warn: Callable[[str], object] | None = None,
        reset_fingerprints: bool = False,
        events: EventLog | None = None,
        extra_state: Mapping[str, Any] | None = None,
    ) -> None:
        check_callable("build_model", build_model)
        check_callable("make_dataset", make_dataset)
        _check_validation(validation_steps, validation_freq, class_weight)
        check_int("epochs", epochs)
        check_int("steps_per_epoch", steps_per_epoch)
        self.build_model = build_model
        self.make_dataset = make_dataset
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.user_callbacks = list(callbacks or [])
        self.verbose = verbose
        self.validation_data = validation_data
        self.fit_options: dict[str, Any] = {
            "validation_steps": validation_steps,
            "validation_freq": validation_freq,
            "class_weight": class_weight,
        }
        self.warn = warn or (lambda message: log.warning("%s", message))
        self.extra_state = _check_extra_state(extra_state)
        self.fingerprints = DataFingerprints(
            make_dataset, reset=reset_fingerprints, events=events
        )
        self.events = events
        self.grain = GrainPosition(jax_distributed.grain_shards)
        # The batches handed to fit, and the proof of a resume's position
        # (data/proof.py); the resumed epoch is built by `resumed_make`.
        self.trail = BatchTrail()
        self.proof = PositionProof(events, reset=reset_fingerprints)
        self.resumed_make = make_dataset
        self.rebuild_watch = RebuildWatch(self.warn)
        for warning in callback_state.check_callbacks(self.user_callbacks):
            self.warn(warning)
        self.model: Any = None
        self._state: Any = None  # what checkpoints hold; see `state`
        self._slots: callback_state.ArraySlots | None = None
        self.random_ops: RandomOpWatch | None = None
        self.resumed_from = ""  # one line for the progress bar, after a restore
        self.said_resumed = False
        self.callback_states: list[Any] | None = None  # to put back, from a restore
        self.metric_state: list[Any] | None = None
        self.history = _new_history()
        self.epoch = 0
        self.skip = 0
        self.step = 0  # the last step trained (what a save now holds)
        self._span_start = (0, 0)  # (first epoch, its skip) of the fit call running
        self.last_logs: dict[str, Any] = {}
        self._user_callbacks: Any = None  # one CallbackList for the whole call
        self._started_callbacks = False

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    # --- the driver protocol (colab_resume.agent.driver) ------------------------------

    def build(self) -> None:
        """Call ``build_model()``; the agent has entered a fresh strategy scope."""
        import keras

        model = self.build_model()
        if not isinstance(model, keras.Model):
            raise ModelError(
                f"build_model() returned {type(model).__name__}; it must return a "
                f"keras.Model, built and compiled inside it."
            )
        if _outside_scope(model):
            raise ModelError(
                "build_model() returned a model created outside the strategy "
                "scope the agent entered for it (built before build_model was "
                "called, or kept from an earlier call): its variables are not "
                "on the accelerator's replicas. Create the model inside "
                "build_model (model = keras.Sequential(...); model.compile(...); "
                "return model), so it is built afresh after every restart."
            )
        if getattr(model, "optimizer", None) is None or not getattr(
            model, "compiled", True
        ):
            raise ModelError(
                "build_model() returned a model that is not compiled. Call "
                "model.compile(optimizer=..., loss=...) inside build_model, so the "
                "agent can rebuild it in a fresh strategy scope after a restart."
            )
        if type(model).call is keras.Model.call and not model.built:
            # A model that only overrides train_step (the keras-io GANs and
            # VAEs) has nothing to build: Keras would try, under a strategy,
            # and fail ("Unable to automatically build the model").
            model.built = True
        _build_preprocessor(model)
        self.model = model
        self._state = None

    @property
    def state(self) -> Any:
        """The model, plus the callbacks' arrays and ``extra_state``, if any."""
        if self._state is None:
            self._slots = callback_state.ArraySlots(self.user_callbacks, self.model)
            extras = {f"extra_{k}": v for k, v in self.extra_state.items()}
            if self._slots is not None and self._slots.flat:
                extras["callbacks"] = self._slots.flat
            self._state = ModelAndExtras(self.model, extras) if extras else self.model
        return self._state

    def restored(self, info: RestoredInfo | None) -> int:
        """Take what the checkpoint carried; return the step to start from."""
        if info is None:
            return 0
        saved = info.extras.get("history") or {}
        self.history = _new_history(saved.get("epoch"), saved.get("history"))
        self.fingerprints.restored(info.extras, info.step)
        self.grain.restored(info.extras)
        self.proof.restored(info.extras)
        self.last_logs = dict(info.metrics or {})
        self.resumed_from = info.describe(self.steps_per_epoch)
        self.callback_states = info.extras.get("callbacks")
        self.metric_state = info.extras.get("metric_state")
        return info.step

    def metrics(self) -> dict[str, Any]:
        return scalars(self.last_logs)

    def snapshot(self) -> Snapshot:
        history = {"epoch": list(self.history.epoch), "history": self.history.history}
        backend.current().sync_fit_state(self.model)
        # The epoch this checkpoint resumes in (or, at its end, the last one
        # before) is the one a resume checks: recorded once, by its first save.
        setup = self.fingerprints.record(self.epoch)
        state = self.state
        if self._slots is not None:
            self._slots.store()
        extras = {
            "history": history,
            **self.fingerprints.extras(),
            "callbacks": callback_state.capture(self.user_callbacks),
            "metric_state": metric_state.capture(self.model),
            **self.grain.extras(
                self.epoch, self.step - self.epoch * self.steps_per_epoch
            ),
            **self.trail.extras(
                self.epoch, self.step - self.epoch * self.steps_per_epoch
            ),
        }
        return Snapshot(state, self.epoch, self.metrics(), extras, setup)

    def train(self, start_step: int, duties: StepDuties, strategy: Any = None) -> None:
        """Train from ``start_step`` to the end (or until stopped).

        ``strategy`` is unused: the model was built in its scope, and Keras's
        ``fit`` distributes through it.
        """
        start_epoch, skip = split_step(start_step, self.steps_per_epoch)
        self.step = start_step
        regrouped = False
        if start_step and not accepts_skip(self.make_dataset):
            regrouped = self.grain.check(self.make_dataset, start_epoch, skip)
        if regrouped:
            # An elastic iterator on another process count: its own global
            # position places it, and each shard's first batch now differs.
            self.fingerprints.forget()
        elif start_step:
            self.fingerprints.check(start_epoch)
        if start_step and jax_distributed.process_count() == 1:
            self.resumed_make = self.proof.check(
                self.make_dataset, start_epoch, skip, self.steps_per_epoch
            )
        hook = _make_hook(self, duties)
        callbacks = [hook] + ([_make_progbar(self)] if self.verbose != 0 else [])
        # The step is traced during its first call: watch what it creates.
        # None where no stateful random op can hide from the checkpoint (JAX).
        self.random_ops = backend.current().random_op_watch()
        try:
            self._train_epochs(start_epoch, skip, callbacks)
        finally:
            self.end_random_op_watch()
        hook.finish()

    def _train_epochs(self, start_epoch: int, skip: int, callbacks: list[Any]) -> None:
        """Epoch after epoch, several to a ``fit`` call where that is safe
        (:mod:`~colab_resume.agent.spans`)."""
        epoch, length = start_epoch, 1
        built: list[Any] = []  # datasets built that the last span could not take
        while epoch < self.epochs:
            first_skip = skip if epoch == start_epoch else 0
            if not built:
                built.append(self._epoch_data(epoch, first_skip, epoch == start_epoch))
            datasets = self._span(epoch, first_skip, length, built)
            trained = self._fit_span(epoch, first_skip, datasets, callbacks)
            if self.model.stop_training:
                break
            built[:0] = datasets[trained:]  # not chained after all: next
            epoch += trained
            length = spans.next_length(length)

    def _span(self, epoch: int, skip: int, length: int, built: list[Any]) -> list[Any]:
        """The datasets of up to ``length`` epochs from ``epoch`` that can share
        one ``fit`` call; taken from ``built`` (which keeps any left over)."""
        span = [built.pop(0)]
        if (
            skip
            or not backend.current().chains_epochs
            or not spans.boundaries_invisible(
                self.model, self.validation_data, self.fit_options["validation_steps"]
            )
            or self.rebuild_watch.warned  # large or slow: not several at once
            or not spans.chainable(span[0], self.steps_per_epoch)
        ):
            return span
        while len(span) < length and epoch + len(span) < self.epochs:
            if not built:
                built.append(self._epoch_data(epoch + len(span), 0, False))
            if not spans.chainable(built[0], self.steps_per_epoch):
                break
            span.append(built.pop(0))
        return span

    def _epoch_data(self, epoch: int, skip: int, first: bool) -> Any:
        """``epoch``'s dataset, positioned at ``skip``.

        Its fingerprint is recorded by the first save in it (:meth:`snapshot`),
        not here: that costs a second build and a first batch, which only a
        checkpoint needs, and most epochs end without one at the cadences
        users choose.
        """
        started = time.perf_counter()
        dataset = epoch_dataset(
            self.resumed_make if first else self.make_dataset,
            epoch,
            skip=skip,
            steps_per_epoch=self.steps_per_epoch,
            position=self.grain,
        )
        if jax_distributed.process_count() == 1:
            # Batches that pass through Python are kept as fit draws them:
            # a save's position proof hashes the next one (agent/trail.py).
            dataset = self._followed(dataset, epoch, skip)
        chosen = backend.current()
        if chosen.reads_pipeline_graphs:
            self.rebuild_watch.check(
                dataset, epoch=epoch, seconds=time.perf_counter() - started
            )
        if first:
            chosen.check_first_batch(self.make_dataset, dataset, epoch, self.model)
            if skip and self.grain.how:
                said = f"Grain pipeline positioned {self.grain.said()}"
                log.info("[step %d] %s", self.step, said)
                if self.events is not None:
                    self.events.emit("data.positioned", said, step=self.step)
        return dataset

    def _followed(self, dataset: Any, epoch: int, skip: int) -> Any:
        """``dataset``, of its own kind, its batches known to the trail."""
        if hasattr(dataset, "__next__"):
            return self.trail.follow(dataset, epoch, skip)
        follow = getattr(dataset, "follow_batches", None)
        if callable(follow):  # a Grain IterDataset, positioned (data/grain_fed.py)
            return follow(lambda batches: self.trail.follow(batches, epoch, skip))
        if is_grain(dataset) and hasattr(dataset, "__getitem__"):
            # A Grain MapDataset slice from `skip`: a save looks its batch up.
            self.trail.index(lambda place: dataset[place - skip], epoch)
        return dataset

    def _fit_span(
        self, epoch: int, skip: int, datasets: list[Any], callbacks: list[Any]
    ) -> int:
        """One ``model.fit`` over consecutive epochs from ``epoch``; returns
        how many it trained (the first only, if they cannot be chained)."""
        self.epoch, self.skip = epoch, skip
        self._span_start = (epoch, skip)
        try:
            dataset = spans.chain(datasets)
        except TypeError:  # their elements differ: one epoch per call
            dataset, datasets = datasets[0], datasets[:1]
        # The dataset's own order is the order: Keras cannot shuffle a
        # tf.data.Dataset or a generator, and its default shuffle=True
        # says so with a warning under every training cell.
        fit_options = dict(self.fit_options, shuffle=False)
        validation = self.validation_data
        if callable(validation):
            validation = validation(epoch)
        fed, release = backend.current().fit_input(dataset, self.model)
        try:
            self.model.fit(
                fed,
                initial_epoch=epoch,
                epochs=epoch + len(datasets),
                steps_per_epoch=self.steps_per_epoch - skip,
                callbacks=callbacks,
                verbose=self.verbose,
                validation_data=validation,
                **fit_options,
            )
        finally:
            release()
        return len(datasets)

    def enter_epoch(self, epoch: int) -> None:
        """Keras begins ``epoch`` (of the current ``fit`` call's span)."""
        first, skip = self._span_start
        self.epoch, self.skip = epoch, skip if epoch == first else 0

    def start_random_op_watch(self) -> None:
        if self.random_ops is not None:
            self.random_ops.__enter__()

    def end_random_op_watch(self) -> None:
        watch, self.random_ops = self.random_ops, None
        if watch is not None:
            watch.__exit__(None, None, None)
            warning = watch.warning()
            if warning:
                self.warn(warning)

    # --- called by the hook -----------------------------------------------------------

    def begin_callbacks(self, users: Any, logs: Any) -> None:
        """``on_train_begin`` for new callbacks; saved state for resumed ones.

        Args:
            users: the ``CallbackList`` of the user's callbacks (it must see
                one ``on_train_begin`` per ``on_train_end``).
            logs: passed on.
        """
        states, self.callback_states = self.callback_states, None
        fresh = not self._started_callbacks
        self._started_callbacks = True
        resumed: set[int] = set()
        if states is not None:
            resumed, warnings = callback_state.apply(
                self.user_callbacks, states, fresh=fresh
            )
            for warning in warnings:
                self.warn(warning)
            if self._slots is not None:
                self._slots.load(states, self.user_callbacks)
        if not fresh:
            return  # an in-session recovery: the run began in this process
        quiet = [self.user_callbacks[i] for i in resumed]
        for callback in quiet:  # they began in an earlier process
            callback.on_train_begin = _ignore
        try:
            users.on_train_begin(logs)
        finally:
            for callback in quiet:
                del callback.on_train_begin

    def resume_epoch(self) -> None:
        """Put the interrupted epoch's running metrics back after Keras's reset."""
        saved, self.metric_state = self.metric_state, None
        if saved:
            problem = metric_state.apply(self.model, saved)
            if problem:
                self.warn(problem)

    def record_epoch(self, epoch: int, logs: dict[str, Any] | None) -> None:
        self.history.epoch.append(epoch)
        for key, value in scalars(logs or {}).items():
            self.history.history.setdefault(key, []).append(value)


def _make_hook(driver: KerasFit, duties: StepDuties) -> Any:
    """The forwarding callback (:mod:`colab_resume.agent.keras_hooks`, imported
    here so that Keras is imported only when training)."""
    from colab_resume.agent import keras_hooks

    if driver._user_callbacks is None:
        # Shared by the hooks of every recovery, so begin/end stay paired.
        driver._user_callbacks = keras_hooks.user_callbacks(driver.user_callbacks)
    return keras_hooks.AgentHook(driver, duties, driver._user_callbacks)


def _make_progbar(driver: KerasFit) -> Any:
    """Keras' progress bar for the whole run
    (:class:`~colab_resume.agent.keras_hooks.RunProgbar`)."""
    from colab_resume.agent.keras_hooks import RunProgbar

    return RunProgbar(driver)


def _build_preprocessor(model: Any) -> None:
    """Build a keras-hub task's preprocessor now, on the training thread.

    A keras-hub preprocessor creates its packer in ``build()``, at its
    first call. A task's own ``fit`` maps it over a Grain dataset as it is
    handed one, on Grain's reading threads, several at once: their
    ``build()`` calls race, and one that adds the packer after another
    finished raises "You cannot add new elements of state ... to a layer
    that is already built" (4 tries in 10 on 8 threads). Built first, the
    calls only read it. A preprocessor that cannot be built without its
    input's shape is left as it is, to build as it would without the agent.
    """
    preprocessor = getattr(model, "preprocessor", None)
    if preprocessor is None or getattr(preprocessor, "built", True):
        return
    try:
        preprocessor.build(None)
    except Exception:  # noqa: BLE001 - not ours to fail: fit builds it as before
        return


def _outside_scope(model: Any) -> bool:
    """Whether ``model`` was created outside the strategy scope now entered.

    Keras (TF) records the strategy in scope when a model is constructed;
    a model made before the agent's scope has none, or an older one.
    JAX has no strategy scope (its distribution is global).
    """
    return backend.current().outside_scope(model)


def _new_history(
    epochs: list[int] | None = None, values: dict[str, Any] | None = None
) -> Any:
    import keras

    history = keras.callbacks.History()
    history.epoch = list(epochs or [])
    history.history = {k: list(v) for k, v in (values or {}).items()}
    return history


def _check_extra_state(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        raise ValueError(
            f"extra_state must be a dict of name -> trackable (a tf.random.Generator, "
            f"a variable, a list of variables, an optimizer), got "
            f"{type(extra).__name__}."
        )
    for key in extra:
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(
                f"extra_state keys must be identifiers such as 'augment_rng', got "
                f"{key!r}."
            )
    return dict(extra)


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


def _check_validation(
    validation_steps: Any, validation_freq: Any, class_weight: Any
) -> None:
    check_int("validation_steps", validation_steps, optional=True)
    check_int("validation_freq", validation_freq, hint="(Validate every N epochs.)")
    if class_weight is not None and not isinstance(class_weight, dict):
        raise ValueError(
            f"class_weight must be a dict of class index -> weight, got "
            f"{type(class_weight).__name__}."
        )

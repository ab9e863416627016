"""What a Keras callback carries across a process death.

Keras callbacks keep their state in instance attributes (EarlyStopping's
``best``, ReduceLROnPlateau's ``wait``, CSVLogger's open file), which no
model checkpoint holds. So each checkpoint also carries, for every callback
passed to ``agent.fit``, a small JSON-able record of that state, and a
resumed run puts it back before the callback sees its first event.

The protocol, for your own callbacks::

    class MyCallback(keras.callbacks.Callback):
        def get_resume_state(self) -> dict:      # JSON-able values
            return {"seen": self.seen}

        def set_resume_state(self, state: dict) -> None:
            self.seen = state["seen"]

A resumed process calls ``set_resume_state`` *instead of* ``on_train_begin``
(the run began once, in an earlier process), so your callback sees exactly
the calls of an uninterrupted run. The built-in Keras callbacks are handled
here without any change to your code; one with instance state and no
protocol gets one warning naming it. Numpy arrays (EarlyStopping's best
weights) travel in the checkpoint's tensors, not in this record: see
:class:`ArraySlots`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from colab_resume import backend
from colab_resume.errors import ColabResumeError
from colab_resume.protocol.extras import PROTOCOL

GET, SET = "get_resume_state", "set_resume_state"

# Beyond this a CSV log is continued only where its file survived (same VM).
CSV_CONTENT_LIMIT = 256 * 1024


class CallbackConflictError(ColabResumeError, ValueError):
    """A callback passed to ``agent.fit`` conflicts with the agent's own resume."""


def _num(value: Any) -> Any:
    """A float for JSON: non-finite values as strings (JSON has no Infinity)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else repr(value)


def _unnum(value: Any) -> Any:
    return None if value is None else float(value)


# --- built-in callbacks: get(cb) -> state, put(cb, state, fresh) --------------------
#
# ``fresh``: the callback object is new in this process (it has not seen
# on_train_begin), as opposed to an in-session recovery, where it has.


def _early_stopping_get(cb: Any) -> dict[str, Any]:
    return {
        "wait": int(cb.wait),
        "stopped_epoch": int(cb.stopped_epoch),
        "best": _num(cb.best),
        "best_epoch": int(cb.best_epoch),
        "has_best_weights": cb.best_weights is not None,
    }


def _early_stopping_put(cb: Any, state: dict[str, Any], fresh: bool) -> None:
    if fresh:
        cb.on_train_begin()
    cb.wait = state["wait"]
    cb.stopped_epoch = state["stopped_epoch"]
    cb.best = _unnum(state["best"])
    cb.best_epoch = state["best_epoch"]


def _plateau_get(cb: Any) -> dict[str, Any]:
    return {
        "wait": int(cb.wait),
        "best": _num(cb.best),
        "cooldown_counter": int(cb.cooldown_counter),
    }


def _plateau_put(cb: Any, state: dict[str, Any], fresh: bool) -> None:
    if fresh:
        cb.on_train_begin()
    cb.wait = state["wait"]
    cb.best = _unnum(state["best"])
    cb.cooldown_counter = state["cooldown_counter"]


def _model_checkpoint_get(cb: Any) -> dict[str, Any]:
    return {
        "best": _num(cb.best),
        "last_batch_seen": cb._last_batch_seen,
        "batches_since_save": int(cb._batches_seen_since_last_saving),
        "current_epoch": int(cb._current_epoch),
    }


def _model_checkpoint_put(cb: Any, state: dict[str, Any], fresh: bool) -> None:
    if fresh:
        cb.on_train_begin()
    cb.best = _unnum(state["best"])
    cb._last_batch_seen = state["last_batch_seen"]
    cb._batches_seen_since_last_saving = state["batches_since_save"]
    cb._current_epoch = state["current_epoch"]


def _csv_get(cb: Any) -> dict[str, Any]:
    if cb.csv_file is not None and not cb.csv_file.closed:
        cb.csv_file.flush()
    size = os.path.getsize(cb.filename) if os.path.exists(cb.filename) else 0
    state: dict[str, Any] = {"size": size, "keys": cb.keys}
    if size <= CSV_CONTENT_LIMIT:
        with open(cb.filename, encoding="utf-8", newline="") as handle:
            state["content"] = handle.read() if size else ""
    return state


def _csv_put(cb: Any, state: dict[str, Any], fresh: bool) -> None:
    """Continue the file as it was at the checkpoint: no truncation, no replay."""
    if cb.csv_file is not None and not cb.csv_file.closed:
        cb.csv_file.close()
    if "content" in state:  # also on a new machine, where the file is gone
        os.makedirs(os.path.dirname(os.path.abspath(cb.filename)), exist_ok=True)
        with open(cb.filename, "w", encoding="utf-8", newline="") as handle:
            handle.write(state["content"])
    elif os.path.exists(cb.filename):
        os.truncate(cb.filename, min(state["size"], os.path.getsize(cb.filename)))
    append = cb.append
    cb.append = True
    cb.on_train_begin()  # opens the file for appending; header only if empty
    cb.append = append
    cb.keys = state["keys"]


def _tensorboard_get(cb: Any) -> dict[str, Any]:
    return {
        "train_batch": int(cb._global_train_batch),
        "test_batch": int(cb._global_test_batch),
    }


def _tensorboard_put(cb: Any, state: dict[str, Any], fresh: bool) -> None:
    if fresh:
        cb.on_train_begin()
        cb._pop_writer()
    cb._global_train_batch = state["train_batch"]
    cb._global_test_batch = state["test_batch"]
    if fresh:  # summaries continue at the run's step, not at 0
        cb._push_writer(cb._train_writer, cb._global_train_batch)


def _builtin_handlers() -> dict[type, tuple[Any, Any]]:
    import keras

    c = keras.callbacks
    return {
        c.EarlyStopping: (_early_stopping_get, _early_stopping_put),
        c.ReduceLROnPlateau: (_plateau_get, _plateau_put),
        c.ModelCheckpoint: (_model_checkpoint_get, _model_checkpoint_put),
        c.CSVLogger: (_csv_get, _csv_put),
        c.TensorBoard: (_tensorboard_get, _tensorboard_put),
    }


def _stateless() -> tuple[type, ...]:
    """Built-ins whose behaviour depends on nothing but the model and the logs.

    (LearningRateScheduler reads the optimizer's learning rate, which the
    checkpoint holds.)
    """
    import keras

    c = keras.callbacks
    return (
        c.LearningRateScheduler,
        c.TerminateOnNaN,
        c.LambdaCallback,
        c.History,
        c.ProgbarLogger,
        c.RemoteMonitor,
        c.SwapEMAWeights,
    )


def _handler(cb: Any) -> tuple[Any, Any] | None:
    for cls in type(cb).__mro__:  # a subclass of a built-in keeps its state
        handler = _builtin_handlers().get(cls)
        if handler is not None:
            return handler
    return None


def _keeper(cb: Any) -> str | None:
    """Who keeps ``cb``'s state: its own protocol, or the handler of the
    Keras built-in it is (by the built-in's name); None: nobody."""
    if has_protocol(cb):
        return PROTOCOL
    for cls in type(cb).__mro__:
        if cls in _builtin_handlers():
            return cls.__name__
    return None


def has_protocol(cb: Any) -> bool:
    return callable(getattr(cb, GET, None)) and callable(getattr(cb, SET, None))


def check_callbacks(callbacks: Sequence[Any]) -> list[str]:
    """Refuse conflicting callbacks; name those whose state cannot be carried.

    Returns:
        One warning per callback that keeps instance state the agent cannot
        save (no protocol, not a known built-in).

    Raises:
        CallbackConflictError: ``BackupAndRestore`` was passed.
    """
    import keras

    warnings = []
    for cb in callbacks:
        if isinstance(cb, keras.callbacks.BackupAndRestore):
            raise CallbackConflictError(
                "keras.callbacks.BackupAndRestore conflicts with the agent's own "
                "resume (it would restore an older state over ours, at the start "
                "of the epoch). Remove it from callbacks: the agent already "
                "checkpoints and resumes exactly, mid-epoch included."
            )
        if has_protocol(cb) or _handler(cb) or isinstance(cb, _stateless()):
            continue
        if _instance_state(cb):
            warnings.append(
                f"callback {type(cb).__name__} keeps instance state "
                f"({', '.join(sorted(_instance_state(cb))[:5])}) that the agent "
                f"cannot checkpoint: after a resume it starts from scratch. Give "
                f"it get_resume_state() -> dict and set_resume_state(state) (see "
                f"README, 'What makes resume exact'), or ignore this if that "
                f"state does not matter."
            )
    return warnings


_BASE_ATTRIBUTES = {"model", "params", "_model", "validation_data", "_params"}


def _instance_state(cb: Any) -> set[str]:
    return {k for k in vars(cb) if k not in _BASE_ATTRIBUTES}


def capture(callbacks: Sequence[Any]) -> list[dict[str, Any] | None]:
    """The state of each callback, by position (None: nothing to carry)."""
    states: list[dict[str, Any] | None] = []
    for cb in callbacks:
        if has_protocol(cb):
            state: dict[str, Any] | None = dict(getattr(cb, GET)())
        elif (handler := _handler(cb)) is not None:
            state = handler[0](cb)
        else:
            state = None
        states.append(
            None
            if state is None
            else {"class": type(cb).__name__, "state": state, "kept_by": _keeper(cb)}
        )
    return states


def apply(
    callbacks: Sequence[Any], saved: Sequence[Any], *, fresh: bool
) -> tuple[set[int], list[str]]:
    """Put each callback's saved state back.

    Args:
        callbacks: the callbacks of this ``fit`` call.
        saved: what :func:`capture` returned when the checkpoint was taken.
        fresh: the callbacks are new in this process (not yet begun).

    Returns:
        The positions of the callbacks that were resumed (they must not get
        ``on_train_begin`` again), and a warning per saved state that no
        longer fits its callback.
    """
    resumed: set[int] = set()
    warnings: list[str] = []
    for index, cb in enumerate(callbacks):
        entry = saved[index] if index < len(saved) else None
        if not isinstance(entry, dict):
            continue
        kept_by = entry.get("kept_by")
        if kept_by is not None and kept_by != _keeper(cb):
            # Its state was written by another keeper (a built-in's handler,
            # the callback's own protocol): this one never reads it.
            warnings.append(
                f"callback #{index} ({type(cb).__name__}) keeps its state by "
                f"{_said(_keeper(cb))}, the checkpoint's was kept by "
                f"{_said(kept_by)}: not restored (pass the same callbacks to "
                f"continue them)"
            )
            continue
        if entry.get("class") != type(cb).__name__:
            warnings.append(
                f"callback #{index} is {type(cb).__name__} but the checkpoint holds "
                f"the state of a {entry.get('class')}: not restored (pass the same "
                f"callbacks in the same order to continue them)"
            )
            continue
        if has_protocol(cb):
            getattr(cb, SET)(entry["state"])
        elif (handler := _handler(cb)) is not None:
            handler[1](cb, entry["state"], fresh)
        else:
            continue
        resumed.add(index)
    return resumed, warnings


def _said(keeper: Any) -> str:
    if keeper == PROTOCOL:
        return "its own get_resume_state"
    return f"the agent's {keeper} handler" if keeper else "nobody"


class ArraySlots:
    """Host arrays of callbacks (EarlyStopping's best weights) as checkpoint tensors.

    Each ``EarlyStopping(restore_best_weights=True)`` gets one variable per
    model weight, on the CPU, outside any strategy; its best weights are
    copied in at each save and read back at a resume. They live in the
    checkpoint's ``callbacks`` group, so they are verified like every tensor.
    """

    def __init__(self, callbacks: Sequence[Any], model: Any) -> None:
        import keras

        self.owners: list[Any] = [
            cb
            for cb in callbacks
            if isinstance(cb, keras.callbacks.EarlyStopping) and cb.restore_best_weights
        ]
        self.variables: list[Any] = []
        if not self.owners:
            return
        shapes = [(tuple(w.shape), str(w.dtype)) for w in model.weights]
        for _ in self.owners:
            self.variables.append([_host_variable(*spec) for spec in shapes])

    @property
    def flat(self) -> list[Any]:
        return [v for slots in self.variables for v in slots]

    def store(self) -> None:
        """Copy each owner's best weights into its variables (before a save)."""
        for cb, slots in zip(self.owners, self.variables, strict=True):
            if cb.best_weights is not None:
                for variable, value in zip(slots, cb.best_weights, strict=True):
                    variable.assign(value)

    def load(self, states: Sequence[Any], callbacks: Sequence[Any]) -> None:
        """Give each owner back its best weights, where the checkpoint had them."""
        for cb, slots in zip(self.owners, self.variables, strict=True):
            entry = states[list(callbacks).index(cb)] if states else None
            if isinstance(entry, dict) and entry["state"].get("has_best_weights"):
                cb.best_weights = [_to_numpy(v) for v in slots]


def _host_variable(shape: tuple[int, ...], dtype: str) -> Any:
    """A zero variable outside any strategy (TF: on the CPU), for host arrays."""
    return backend.current().host_variable(shape, dtype)


def _to_numpy(variable: Any) -> Any:
    import keras

    if isinstance(variable, keras.Variable):
        return keras.ops.convert_to_numpy(variable.value)
    return variable.numpy()

"""The input iterators of a ``fit`` call, let go of off the training thread.

When ``model.fit`` returns, the ``tf.data`` iterators it made die with it,
on the thread that called it. On TensorFlow 2.21 on CPU, deleting one can
block that thread for seconds, and for longer the longer the iterator
lived: the delete waits for tf.data's autotuning thread, which sometimes
sleeps out its current optimisation period (it doubles, up to a minute)
instead of waking on cancellation. Measured with the overhead bench
(``bench/head_to_head/overhead.py``), 4 to 70 s after each of the agent's
``fit`` calls, with the training thread idle; a plain ``fit`` pays it at
its end too, and between epochs where Keras makes an iterator per epoch.

The agent feeds ``fit`` its own distributed dataset whose iterators it
keeps a reference to, and hands them to one daemon thread when ``fit``
returns; that thread's delete waits, training does not. Only what ``fit``
would have made anyway is made: the same strategy distributes the same
dataset.
"""

from __future__ import annotations

import atexit
import gc
import queue
import threading
from typing import Any

__all__ = ["Release", "fit_input"]

# Past tf.data's longest wait (its period stops doubling at a minute).
EXIT_WAIT_SECONDS = 90.0

_lock = threading.Lock()
_reaper: _Reaper | None = None


def fit_input(dataset: Any, strategy: Any) -> tuple[Any, Release]:
    """What to pass ``fit`` for ``dataset``, and what to call once it returned.

    Returns ``(input, release)``: ``input`` trains exactly as ``dataset``
    would (``strategy.experimental_distribute_dataset``, which Keras calls
    itself otherwise); ``release()`` hands the iterators ``fit`` made from
    it to the reaper thread. Where the distributed dataset cannot keep its
    iterators (a type this TensorFlow will not let us extend), ``input`` is
    ``dataset`` itself and ``release`` does nothing.
    """
    distributed = strategy.experimental_distribute_dataset(dataset)
    release = Release()
    try:
        distributed.__class__ = _keeping(type(distributed), release.iterators)
    except TypeError:  # a layout Python cannot re-class: let Keras do it
        return dataset, release
    return distributed, release


class Release:
    """The iterators ``fit`` made from its input; calling it lets go of them."""

    def __init__(self) -> None:
        self.iterators: list[Any] = []

    def __call__(self) -> None:
        if self.iterators:
            _reaper_thread().take(self.iterators[:])
            self.iterators.clear()


def _keeping(base: Any, kept: list[Any]) -> type:
    """``base`` whose ``iter()`` also appends what it returns to ``kept``.

    A class per ``fit`` call, not an attribute on the dataset: TensorFlow's
    objects track (and wrap) the attributes set on them.
    """

    def __iter__(self: Any) -> Any:  # noqa: N807 - the protocol's name
        iterator = base.__iter__(self)
        kept.append(iterator)
        return iterator

    return type(base.__name__, (base,), {"__iter__": __iter__})


class _Reaper:
    """One daemon thread that drops the references it is handed.

    The interpreter must not finalize while a delete is under way: a daemon
    thread that wakes inside TensorFlow's C++ destructor then is ended by
    the interpreter, and the process aborts ("FATAL: exception not
    rethrown", exit -6). So the process waits at exit for the deletes
    handed over, as long as they take: never longer than the training
    thread itself would have waited for them.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[Any]] = queue.SimpleQueue()
        self._pending = 0
        self._idle = threading.Condition()
        self.thread = threading.Thread(
            target=self._run, name="colab-resume-iterator-reaper", daemon=True
        )
        self.thread.start()
        atexit.register(self.wait)

    def take(self, iterators: list[Any]) -> None:
        with self._idle:
            self._pending += 1
        self._queue.put(iterators)

    def wait(self, timeout: float | None = EXIT_WAIT_SECONDS) -> bool:
        """Wait until every delete handed over is done; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _run(self) -> None:
        while True:
            iterators = self._queue.get()
            # The last references: the deletes (and their waits) happen here;
            # the collection takes any caught in a reference cycle, which
            # would otherwise die in whichever thread next collects.
            iterators.clear()
            del iterators
            gc.collect()
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()


def _reaper_thread() -> _Reaper:
    global _reaper
    with _lock:
        if _reaper is None:
            _reaper = _Reaper()
        return _reaper

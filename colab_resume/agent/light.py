"""One session of the lighter path: the run taken for the user's own ``model.fit``.

:meth:`RunLoop.open_light <colab_resume.agent.loop.RunLoop.open_light>`
takes the run, restores the newest checkpoint into the user's model and
returns a :class:`LightSession`; ``agent.restore`` and ``agent.callback``
are thin over it. The session hands out one Keras callback per ``fit``
(:func:`~colab_resume.agent.callback.make_callback`) and ends exactly once,
whoever ends it first: the last ``fit`` (completed or stopped), the watch
that saw a ``fit`` raise (failed), or ``agent.close()`` (stopped).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from colab_resume.agent.callback import ModelState, StartPoint, make_callback
from colab_resume.agent.steps import StepDuties
from colab_resume.checkpoint import CheckpointManager
from colab_resume.heartbeat import RunSession


class LightSession:
    """See the module docstring.

    Args:
        driver: the user's model, restored.
        session: the session holding the run.
        manager: the run's checkpoints, under ``session``'s lease.
        duties: the per-step duties from ``start`` on.
        start: where the restored model stands.
        finish: the loop's final commit (DONE.json, or 'stopped'); called
            once, when a ``fit`` ends the run.
        released: the loop's clean-up once the session ended (the history
            tick stops).
    """

    def __init__(
        self,
        driver: ModelState,
        session: RunSession,
        manager: CheckpointManager,
        duties: StepDuties,
        start: StartPoint,
        *,
        finish: Callable[[], None],
        released: Callable[[], None],
    ) -> None:
        self.driver = driver
        self.start = start
        self._session = session
        self._manager = manager
        self._duties = duties
        self._finish = finish
        self._released = released
        self._ended = False
        self._lock = threading.Lock()  # the fit-watch thread may end it too

    @property
    def ended(self) -> bool:
        """The session was closed (completed, stopped or failed)."""
        return self._ended

    def callback(self) -> Any:
        """A new ``ResumeCallback`` for one ``model.fit`` of this session.

        Raises:
            RuntimeError: the session has ended.
        """
        if self._ended:
            raise RuntimeError(
                "the session agent.restore(model) opened has ended (the run "
                "completed, stopped or failed); call agent.restore(model) again "
                "to continue it."
            )
        return make_callback(
            self.driver, self._duties, self._end_run, self._between_fits, self._abort
        )

    def close(self) -> None:
        """No more callbacks: the agent is closing what it holds (it closes
        the session and the checkpoints itself, on every path)."""
        with self._lock:
            self._ended = True

    def _end(self, closing: Callable[[], None]) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        try:
            closing()
        finally:
            self._released()
            with contextlib.suppress(Exception):
                self._manager.close()

    def _end_run(self) -> None:
        self._end(self._finish)

    def _between_fits(self) -> None:
        # Another fit follows: leave its start committed, keep beating.
        self._duties.save(self._duties.step, reason="fit_end")

    def _abort(self, reason: str) -> None:
        self._end(lambda: self._session.close("failed", error=reason))

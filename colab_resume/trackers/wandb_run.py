"""One W&B run for all the sessions of a training run.

W&B lets the caller choose a run's id, so the first session draws one and
keeps it in the run directory (:mod:`~colab_resume.trackers.identity`), and
every session calls ``wandb.init(id=<that id>, resume="allow")``. W&B wants
steps that only go up: online, a resumed run starts after the last step the
server has; offline (``WANDB_MODE=offline``) each session writes a folder of
its own, and the last step the earlier ones logged is read back from their
files (:mod:`~colab_resume.trackers.wandb_files`). Either way the steps a
killed session logged after its last checkpoint are not logged again
(:mod:`~colab_resume.trackers.logger`), and each resume is marked: the
metric ``colab_resume/resumed_at`` in the first row the session logs, the
summary's ``colab_resume/resumed_at`` and its ``colab_resume/sessions``
count.
"""

from __future__ import annotations

import os
import secrets
import string
from types import TracebackType
from typing import Any

from colab_resume.trackers.identity import claim_identity, storage_of
from colab_resume.trackers.logger import (
    EVERY_METRIC,
    failed,
    require,
)
from colab_resume.trackers.wandb_files import last_logged_step

PIP = "wandb"
MARK = "colab_resume/resumed_at"
SESSIONS = "colab_resume/sessions"
_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_run_id() -> str:
    """A W&B run id: 16 characters W&B accepts in a URL."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(16))


def _offline(run: Any) -> bool:
    return bool(getattr(run.settings, "_offline", False)) or (
        getattr(run.settings, "mode", None) in ("offline", "dryrun")
    )


class WandbSink:
    """:class:`~colab_resume.trackers.logger.Sink` over one W&B run."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self._mark: dict[str, float] = {}

    def logged_through(self) -> dict[str, int]:
        last: int | None = None
        if _offline(self.run):
            own = os.path.join(self.run.dir, os.pardir, f"run-{self.run.id}.wandb")
            wandb_dir = os.path.dirname(os.path.dirname(os.path.abspath(own)))
            last = last_logged_step(wandb_dir, self.run.id, besides=own)
        step = int(getattr(self.run, "step", 0) or 0)
        if step > 0:  # online resume: the server's next step
            last = max(last if last is not None else -1, step - 1)
        return {} if last is None else {EVERY_METRIC: last}

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({**metrics, **self._mark}, step=step)
        self._mark = {}

    def resumed(self, step: int, logged_through: int | None) -> None:
        # A row at a step W&B already has would be dropped: the mark goes
        # into the first row this session logs.
        self._mark = {MARK: float(step)}
        self.run.summary[MARK] = step


class WandbRun:
    """The run's W&B run, opened for this session; use it with ``with``.

    Inside the block ``wandb.run`` is this run; :meth:`callback` logs the
    Keras logs at the run's step. Leaving the block finishes this session's
    part (exit code 0, or 1 on an error; the next session resumes the run).

    Attributes:
        run_id: the W&B run id, the same in every session.
        run: the ``wandb.Run``, inside the block.
        created: this session drew the id (the run's first).
    """

    def __init__(
        self,
        agent: Any,
        *,
        project: str | None = None,
        entity: str | None = None,
        **init_options: Any,
    ) -> None:
        self.agent = agent
        self.wandb = require("wandb", PIP)
        record, self.created = claim_identity(
            storage_of(agent),
            "wandb",
            lambda: {"run_id": new_run_id(), "project": project, "entity": entity},
        )
        self.run_id = str(record["run_id"])
        # The recorded project: a later session that names none reaches the run.
        self.project = project or record.get("project")
        self.entity = entity or record.get("entity")
        self.init_options = init_options
        self.run: Any = None

    def __enter__(self) -> WandbRun:
        self.run = self.wandb.init(
            id=self.run_id,
            resume="allow",
            project=self.project,
            entity=self.entity,
            **self.init_options,
        )
        sessions = int(self.run.summary.get(SESSIONS, 0) or 0) + 1
        self.run.summary[SESSIONS] = sessions
        self.agent.events.emit(
            "tracker.wandb",
            f"W&B run {self.run_id} ({'new' if self.created else 'resumed'})",
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.run.finish(exit_code=1 if failed(exc) else 0)

    def callback(self, update_freq: str | int = "epoch") -> Any:
        """A Keras callback for ``agent.fit``: the Keras logs, at the run's step.

        Args:
            update_freq: ``"epoch"`` (``epoch/loss``... at the step each
                epoch ends) or N (also ``batch/loss``... every N steps).
        """
        from colab_resume.trackers.keras_logger import TrackerLogger

        return TrackerLogger(WandbSink(self.run), update_freq)


def wandb_run(agent: Any, **options: Any) -> WandbRun:
    """The run's W&B run for this session: ``with cr.trackers.wandb_run(agent,
    project="x") as run: agent.fit(..., callbacks=[run.callback()])``.

    Options: ``project``, ``entity``, and any other ``wandb.init`` keyword
    (``config``, ``name``, ``dir``...) but ``id`` and ``resume``, which this
    chooses. See :class:`WandbRun`.
    """
    return WandbRun(agent, **options)

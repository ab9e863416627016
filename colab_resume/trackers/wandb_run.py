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

A recorded id is resumed only when W&B proves the run is this training
run's: its config ``colab_resume/run_id`` holds the run directory's
``run_id`` (``run.json``), read back from the earlier offline files of
that id (offline) or from W&B's API (online; an id W&B has no run of is
nobody's and is used), and it lies in the project (and entity) asked for.
Otherwise a new id is drawn and the refused one named. The config key is
set at ``wandb.init``, or, on a fresh run directory whose ``run.json`` the
first session has not written yet, as soon as training begins.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import string
from collections.abc import Callable
from types import TracebackType
from typing import Any

from colab_resume.trackers.identity import (
    claim_identity,
    replace_refused,
    run_id_of,
    storage_of,
)
from colab_resume.trackers.logger import (
    EVERY_METRIC,
    failed,
    require,
)
from colab_resume.trackers.wandb_files import config, last_logged_step, offline_files

PIP = "wandb"
RUN_KEY = "colab_resume/run_id"  # the run directory's run_id: whose run this is
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

    def __init__(self, run: Any, bind: Callable[[], None] | None = None) -> None:
        self.run = run
        self.bind = bind
        self._mark: dict[str, float] = {}

    def logged_through(self) -> dict[str, int]:
        if self.bind is not None:  # training began: run.json exists by now
            self.bind()
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
        self.storage = storage_of(agent)
        self.dir_run_id = run_id_of(self.storage)
        self.init_options = init_options
        self._bound = False

        def draw() -> dict[str, Any]:
            return {"run_id": new_run_id(), "project": project, "entity": entity}

        record, self.created = claim_identity(self.storage, "wandb", draw)
        if not self.created:
            why = self._not_ours(record, project, entity)
            if why is not None:
                record = replace_refused(
                    self.storage,
                    "wandb",
                    record,
                    why,
                    draw,
                    what="W&B",
                    made="drew",
                    events=agent.events,
                )
                self.created = True
        self.run_id = str(record["run_id"])
        # The recorded project: a later session that names none reaches the run.
        self.project = project or record.get("project")
        self.entity = entity or record.get("entity")
        self.run: Any = None

    def _offline(self) -> bool:
        mode = self.init_options.get("mode") or os.environ.get("WANDB_MODE", "")
        return mode in ("offline", "dryrun")

    def _wandb_dir(self) -> str:
        base = self.init_options.get("dir") or os.environ.get("WANDB_DIR") or "."
        return os.path.join(str(base), "wandb")

    def _not_ours(
        self, record: dict[str, Any], project: str | None, entity: str | None
    ) -> str | None:
        """Why the recorded W&B run is not provably this training run's."""
        run_id = record.get("run_id")
        if (
            not isinstance(run_id, str)
            or not run_id
            or not set(run_id) <= set(_ID_ALPHABET)
        ):
            return "the record names no W&B run id of this package's drawing"
        for name, asked in (("project", project), ("entity", entity)):
            if asked is not None and record.get(name) != asked:
                return (
                    f"it lies in {name} {record.get(name)!r}, not the {name} "
                    f"asked for ({asked!r})"
                )
        if self.dir_run_id is None:
            return "this run directory has no run.json yet, so no run is its"
        if self._offline():
            return self._offline_proof(run_id)
        return self._online_proof(run_id, record)

    def _offline_proof(self, run_id: str) -> str | None:
        files = offline_files(self._wandb_dir(), run_id)
        if any(config(path).get(RUN_KEY) == self.dir_run_id for path in files):
            return None
        if not files:
            return (
                f"no earlier offline folder of it under {self._wandb_dir()} "
                f"shows whose it is"
            )
        return f"none of its {len(files)} offline folders carries {RUN_KEY}"

    def _online_proof(self, run_id: str, record: dict[str, Any]) -> str | None:
        try:
            api = self.wandb.Api()
            entity = self.entity_of(record, api)
            # Loaded lazily: a run W&B lacks is said at the first field read.
            owner = api.run(f"{entity}/{record.get('project')}/{run_id}").config.get(
                RUN_KEY
            )
        except Exception as exc:  # W&B's errors: none is worth more here
            if _no_such_run(exc):
                return None  # an id W&B has no run of is nobody's
            return f"W&B cannot say whose it is: {type(exc).__name__}"
        if owner != self.dir_run_id:
            return (
                f"its config {RUN_KEY} is {owner!r}, and this run directory "
                f"is run {self.dir_run_id!r}"
            )
        return None

    @staticmethod
    def entity_of(record: dict[str, Any], api: Any) -> str:
        return str(record.get("entity") or api.default_entity)

    def bind(self) -> None:
        """Put the run directory's run_id in the W&B run's config once
        ``run.json`` exists (a fresh run directory gets it when its first
        session opens)."""
        if self._bound or self.run is None:
            return
        self.dir_run_id = self.dir_run_id or run_id_of(self.storage)
        if self.dir_run_id is not None:
            self.run.config.update({RUN_KEY: self.dir_run_id}, allow_val_change=True)
            self._bound = True

    def __enter__(self) -> WandbRun:
        options = dict(self.init_options)
        given = options.get("config")
        if self.dir_run_id is not None and isinstance(given, (dict, type(None))):
            options["config"] = {**(given or {}), RUN_KEY: self.dir_run_id}
            self._bound = True
        self.run = self.wandb.init(
            id=self.run_id,
            resume="allow",
            project=self.project,
            entity=self.entity,
            **options,
        )
        sessions = int(self.run.summary.get(SESSIONS, 0) or 0) + 1
        self.run.summary[SESSIONS] = sessions
        self.bind()  # a config wandb.init could not merge (argparse, flags...)
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
        with contextlib.suppress(Exception):  # the block's own error comes first
            self.bind()
        self.run.finish(exit_code=1 if failed(exc) else 0)

    def callback(self, update_freq: str | int = "epoch") -> Any:
        """A Keras callback for ``agent.fit``: the Keras logs, at the run's step.

        Args:
            update_freq: ``"epoch"`` (``epoch/loss``... at the step each
                epoch ends) or N (also ``batch/loss``... every N steps).
        """
        from colab_resume.trackers.keras_logger import TrackerLogger

        return TrackerLogger(WandbSink(self.run, bind=self.bind), update_freq)


def _no_such_run(exc: BaseException) -> bool:
    """W&B's "no such run", as its versions say it: ``RunNotFoundError`` in
    recent ones, the words ``Could not find run`` in older ones."""
    return type(exc).__name__ == "RunNotFoundError" or "Could not find run" in str(exc)


def wandb_run(agent: Any, **options: Any) -> WandbRun:
    """The run's W&B run for this session: ``with cr.trackers.wandb_run(agent,
    project="x") as run: agent.fit(..., callbacks=[run.callback()])``.

    Options: ``project``, ``entity``, and any other ``wandb.init`` keyword
    (``config``, ``name``, ``dir``...) but ``id`` and ``resume``, which this
    chooses. See :class:`WandbRun`.
    """
    return WandbRun(agent, **options)

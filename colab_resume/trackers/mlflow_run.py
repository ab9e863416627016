"""One MLflow run for all the sessions of a training run.

MLflow picks a run's id when the run is created, so the first session
creates it and keeps its id in the run directory
(:mod:`~colab_resume.trackers.identity`); every later session, on any
machine, reopens it with ``mlflow.start_run(run_id=...)``. MLflow keeps
every point logged, with no way to take one back, so the steps a killed
session logged after its last checkpoint are not logged a second time
(:mod:`~colab_resume.trackers.logger`), and each resume is marked on the
run: the tag ``colab_resume.resumed_at`` (the latest), one tag per session
``colab_resume.session.<n>`` (``resumed_at=S logged_through=D``) and the
metric ``colab_resume.resumed_at``, whose value is the step at that step.

The recorded id is reopened only when MLflow proves the run is this
training run's: its tag ``colab_resume.run_id`` holds the run directory's
``run_id`` (``run.json``), and it lies in the experiment asked for (when
one is asked). A planted or stale record is refused by name and a new run
made. The tag is set when the run is created, or, on a fresh run directory
whose ``run.json`` the first session has not written yet, as soon as it
has (at the start of training, and when the block ends).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from colab_resume.trackers.identity import (
    claim_identity,
    replace_refused,
    run_id_of,
    safe_uri,
    storage_of,
)
from colab_resume.trackers.logger import failed, require

PIP = "mlflow"
TAG = "colab_resume"
RUN_TAG = f"{TAG}.run_id"  # the run directory's run_id: whose run this is


class MlflowSink:
    """:class:`~colab_resume.trackers.logger.Sink` over one MLflow run."""

    def __init__(
        self, client: Any, run_id: str, bind: Callable[[], None] | None = None
    ) -> None:
        self.client, self.run_id, self.bind = client, run_id, bind

    def logged_through(self) -> dict[str, int]:
        if self.bind is not None:  # training began: run.json exists by now
            self.bind()
        run = self.client.get_run(self.run_id)
        through = {}
        for key in run.data.metrics:
            if key.startswith(TAG):
                continue
            steps = [m.step for m in self.client.get_metric_history(self.run_id, key)]
            if steps:
                through[key] = max(steps)
        return through

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id,
            metrics=[Metric(key, value, now, step) for key, value in metrics.items()],
        )

    def resumed(self, step: int, logged_through: int | None) -> None:
        run = self.client.get_run(self.run_id)
        sessions = int(run.data.tags.get(f"{TAG}.sessions", "1"))
        said = f"resumed_at={step} logged_through={logged_through}"
        self.client.set_tag(self.run_id, f"{TAG}.resumed_at", str(step))
        self.client.set_tag(self.run_id, f"{TAG}.session.{sessions}", said)
        self.log({f"{TAG}.resumed_at": float(step)}, step)


class MlflowRun:
    """The run's MLflow run, opened for this session; use it with ``with``.

    Inside the block it is MLflow's active run (``mlflow.log_param`` and
    friends reach it); :meth:`callback` logs the Keras logs at the run's
    step. Leaving the block ends it FINISHED when the training run
    completed, KILLED when this session stopped or was preempted before the
    end (the next session reopens it), FAILED on an error.

    Attributes:
        run_id: the MLflow run id, the same in every session.
        created: this session created the MLflow run (the run's first).
    """

    def __init__(
        self,
        agent: Any,
        *,
        experiment: str | None = None,
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        self.agent = agent
        self.mlflow = require("mlflow", PIP)
        if tracking_uri is not None:
            self.mlflow.set_tracking_uri(tracking_uri)
        self.tracking_uri = str(self.mlflow.get_tracking_uri())
        self.client = self.mlflow.MlflowClient(self.tracking_uri)
        self.storage = storage_of(agent)
        self.dir_run_id = run_id_of(self.storage)
        self._bound = False
        made: list[str] = []

        def create() -> dict[str, Any]:
            experiment_id = str(self._experiment_id(experiment))
            run_tags = dict(tags or {})
            if self.dir_run_id is not None:
                run_tags[RUN_TAG] = self.dir_run_id
            run = self.client.create_run(
                experiment_id, run_name=run_name, tags=run_tags
            )
            made.append(run.info.run_id)
            self._bound = self.dir_run_id is not None
            return {
                "run_id": run.info.run_id,
                "experiment_id": experiment_id,
                "tracking_uri": safe_uri(self.tracking_uri),
            }

        record, self.created = claim_identity(self.storage, "mlflow", create)
        if made and not self.created:  # another session's record won the race
            self.client.delete_run(made[0])
        if not self.created:
            why = self._not_ours(record, experiment)
            if why is not None:
                record = replace_refused(
                    self.storage,
                    "mlflow",
                    record,
                    why,
                    create,
                    what="MLflow",
                    made="created",
                    events=agent.events,
                )
                self.created = True
            else:
                self._bound = True
        self.run_id = str(record["run_id"])
        if record.get("tracking_uri") != safe_uri(self.tracking_uri):
            agent.events.emit(
                "tracker.moved",
                f"MLflow: this run's MLflow run {self.run_id} was created on "
                f"{record.get('tracking_uri')}; tracking to "
                f"{safe_uri(self.tracking_uri)} now",
                level="warning",
            )
        self.run: Any = None

    def _not_ours(self, record: dict[str, Any], experiment: str | None) -> str | None:
        """Why the recorded MLflow run is not provably this training run's."""
        run_id = record.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            return "the record names no run id"
        try:
            run = self.client.get_run(run_id)
        except Exception as exc:  # MLflow's errors: none is worth more here
            return f"the tracking server cannot give it: {type(exc).__name__}"
        asked = self._experiment_id(experiment, create=False)
        if asked is not None and str(run.info.experiment_id) != asked:
            return (
                f"it lies in experiment {run.info.experiment_id}, not the "
                f"experiment asked for ({asked})"
            )
        if self.dir_run_id is None:
            return "this run directory has no run.json yet, so no run is its"
        owner = run.data.tags.get(RUN_TAG)
        if owner != self.dir_run_id:
            return (
                f"its tag {RUN_TAG} is {owner!r}, and this run directory is "
                f"run {self.dir_run_id!r}"
            )
        return None

    def _experiment_id(
        self, experiment: str | None, *, create: bool = True
    ) -> str | None:
        """The experiment asked for, by id (created if ``create``); without
        ``create``, None where none is asked and ``"missing"`` for a name
        the server does not know."""
        if experiment is None:  # MLflow's own defaults, as its fluent API reads them
            given = os.environ.get("MLFLOW_EXPERIMENT_ID")
            if given:
                return given
            experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME")
            if not experiment:
                # The Default experiment every tracking server has; a later
                # session that names none reaches the recorded run.
                return "0" if create else None
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            return str(found.experiment_id)
        if not create:
            return "missing"
        return str(self.client.create_experiment(experiment))

    def bind(self) -> None:
        """Tag a run this session created with the run directory's run_id,
        once ``run.json`` exists (a fresh run directory gets it when its
        first session opens)."""
        if self._bound:
            return
        self.dir_run_id = self.dir_run_id or run_id_of(self.storage)
        if self.dir_run_id is not None:
            self.client.set_tag(self.run_id, RUN_TAG, self.dir_run_id)
            self._bound = True

    def __enter__(self) -> MlflowRun:
        self.run = self.mlflow.start_run(run_id=self.run_id)
        self.bind()
        if not self.created:
            tags = self.client.get_run(self.run_id).data.tags
            sessions = int(tags.get(f"{TAG}.sessions", "1")) + 1
        else:
            sessions = 1
        self.client.set_tag(self.run_id, f"{TAG}.sessions", str(sessions))
        self.agent.events.emit(
            "tracker.mlflow",
            f"MLflow run {self.run_id} ({'new' if self.created else 'reopened'})",
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.agent.outcome == "COMPLETED" and exc is None:
            status = "FINISHED"
        else:
            status = "FAILED" if failed(exc) else "KILLED"
        with contextlib.suppress(Exception):  # the block's own error comes first
            self.bind()
        self.mlflow.end_run(status)

    def callback(self, update_freq: str | int = "epoch") -> Any:
        """A Keras callback for ``agent.fit``: the Keras logs, at the run's step.

        Args:
            update_freq: ``"epoch"`` (``epoch/loss``... at the step each
                epoch ends) or N (also ``batch/loss``... every N steps).
        """
        from colab_resume.trackers.keras_logger import TrackerLogger

        sink = MlflowSink(self.client, self.run_id, bind=self.bind)
        return TrackerLogger(sink, update_freq)


def mlflow_run(agent: Any, **options: Any) -> MlflowRun:
    """The run's MLflow run for this session: ``with cr.trackers.mlflow_run(agent,
    experiment="x") as run: agent.fit(..., callbacks=[run.callback()])``.

    Options: ``experiment``, ``run_name``, ``tracking_uri`` (default: MLflow's
    own, e.g. ``MLFLOW_TRACKING_URI``), ``tags`` (for a new run). See
    :class:`MlflowRun`.
    """
    return MlflowRun(agent, **options)

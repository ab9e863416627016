"""Experiment trackers see one run across sessions (``cr.trackers``).

The end-to-end part trains ``tests/workers/tracker_worker.py`` with all
three trackers at once — TensorBoard, MLflow against a real ``mlflow
server`` (SQLite store) started here on a free port, W&B offline — kills
it for real (SIGKILL after step 130, past the checkpoint of step 70), and
runs it again to the end. Steps 71..130 are trained twice. Each tracker
must then show one run, the run's steps once each, at the global step, and
the values of an uninterrupted run (the resume is exact); where the
tracker can only be told, the resume step is marked. An uninterrupted
reference run (TensorBoard only) trains alongside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
from support import run_worker, worker
from support.compare import assert_same_reported
from support.mlflow_server import QUIET_ENV

import colab_resume
from colab_resume.storage import Storage
from colab_resume.trackers import identity, tensorboard_log, wandb_files
from colab_resume.trackers.logger import EVERY_METRIC, StepLog

KILL_AT = 130
TOTAL = 180  # 3 epochs x 60 steps, a checkpoint every 70
EPOCH_ENDS = [60, 120, 180]
# The worker imports the package this test imports, wherever it lives.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(colab_resume.__file__)))
ENV = {"PYTHONPATH": ROOT, **QUIET_ENV}


# --- the killed and resumed run ------------------------------------------------------


@pytest.fixture(scope="module")
def sessions(tmp_path_factory, mlflow_server):
    pytest.importorskip("tensorflow", reason="the worker trains with TensorFlow")
    pytest.importorskip("wandb")
    base = tmp_path_factory.mktemp("trackers")
    run_dir, board, wandb_dir = base / "run", base / "tb", base / "wandb"
    os.makedirs(wandb_dir)
    reference_board = base / "reference-tb"
    reference = worker(
        "tracker_worker",
        str(base / "reference-run"),
        *("--tensorboard", str(reference_board)),
        env=ENV,
    )
    try:
        args = (
            str(run_dir),
            *("--tensorboard", str(board)),
            *("--mlflow", mlflow_server),
            *("--wandb", str(wandb_dir)),
        )
        killed = run_worker(
            "tracker_worker",
            *args,
            "--kill-at-step",
            str(KILL_AT),
            expect_rc=-9,
            env=ENV,
        )
        # The kill landed during training, after that step's duties.
        assert f"KILLING at step {KILL_AT}" in killed.stdout, killed
        resumed = run_worker("tracker_worker", *args, env=ENV)
        reference.finish()
    finally:
        reference.kill()
    said = resumed.lines("RESUMED_AT ")
    assert len(said) == 1, resumed
    resumed_at = int(said[0].split()[1])
    # Trained again from a checkpoint before the death: steps done twice.
    assert 0 < resumed_at < KILL_AT, resumed
    return types.SimpleNamespace(
        run_dir=str(run_dir),
        board=str(board),
        reference_board=str(reference_board),
        wandb_dir=str(wandb_dir),
        mlflow=mlflow_server,
        resumed_at=resumed_at,
    )


# --- TensorBoard ---------------------------------------------------------------------


def scalars(folder: str, *, purge: bool) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of one TensorBoard run folder, as TensorBoard reads it.

    ``purge``: TensorBoard's own handling of restarts (its default), or
    every event as written.
    """
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    reader = pea.EventAccumulator(
        folder, size_guidance={pea.TENSORS: 0}, purge_orphaned_data=purge
    )
    reader.Reload()
    found = {}
    for tag in reader.Tags()["tensors"]:
        events = reader.Tensors(tag)
        proto = events[0].tensor_proto
        if proto.tensor_shape.dim:  # not a scalar: the model summary
            continue
        found[tag] = [
            (e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in events
        ]
    return found


@pytest.mark.parametrize("folder", ["train", "validation"])
def test_tensorboard_shows_each_step_once_with_the_uninterrupted_values(
    sessions, folder
):
    pytest.importorskip("tensorboard")
    written = scalars(os.path.join(sessions.board, folder), purge=False)
    shown = scalars(os.path.join(sessions.board, folder), purge=True)
    expected = scalars(os.path.join(sessions.reference_board, folder), purge=True)
    assert sorted(shown) == sorted(expected), folder
    if folder == "train":
        # As written, the redone steps are there twice: the purge matters.
        steps = [step for step, _ in written["batch_loss"]]
        assert steps == [
            *range(1, KILL_AT + 1),  # the killed session, flushed at its death
            *range(sessions.resumed_at + 1, TOTAL + 1),  # the resumed one
        ]
        assert [s for s, _ in shown["batch_loss"]] == list(range(1, TOTAL + 1))
    for tag, series in expected.items():
        assert [s for s, _ in shown[tag]] == [s for s, _ in series], tag
        assert_same_reported(
            [v for _, v in shown[tag]], [v for _, v in series], f"{folder}/{tag}"
        )
    # Epoch summaries at the step the epoch ended: one axis for all.
    assert [s for s, _ in shown["epoch_loss"]] == EPOCH_ENDS


def test_tensorboard_log_dir_is_the_runs_own(sessions):
    storage = Storage(sessions.run_dir)
    assert identity.read_identity(storage, "tensorboard") == {"log_dir": sessions.board}


def test_restart_file_is_an_event_file_tensorboard_reads(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing import event_file_loader

    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(tensorboard_log.restart_file(42, wall_time=5.0))
    events = list(event_file_loader.EventFileLoader(str(path)).Load())
    assert [e.file_version for e in events] == ["brain.Event:2", ""]
    assert events[1].step == 42 and events[1].session_log.status == 1  # START
    assert events[1].wall_time == 5.0


def test_restart_name_sorts_between_the_sessions_files():
    earlier = ["events.out.tfevents.0000000100.vm.7.0.v2"]
    name = tensorboard_log.restart_name(earlier, host="vm", pid=9, now=200.5)
    writer = "events.out.tfevents.0000000200.vm.9.0.v2"  # same second, next
    assert earlier[0] < name < writer
    # This process wrote a file this second (an in-session recovery).
    mine = ["events.out.tfevents.0000000200.vm.9.0.v2"]
    name = tensorboard_log.restart_name(mine, host="vm", pid=9, now=200.9)
    assert mine[0] < name < "events.out.tfevents.0000000200.vm.9.1.v2"
    assert tensorboard_log.restart_name_before(writer) < writer


# --- MLflow --------------------------------------------------------------------------


def test_mlflow_one_run_each_step_once_and_the_resume_marked(sessions):
    import mlflow

    client = mlflow.MlflowClient(sessions.mlflow)
    record = identity.read_identity(Storage(sessions.run_dir), "mlflow")
    assert record is not None and record["tracking_uri"] == sessions.mlflow
    experiment = client.get_experiment_by_name("trackers")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [record["run_id"]]  # one run
    run = runs[0]
    assert run.info.status == "FINISHED"
    history = {
        key: sorted(
            (m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)
        )
        for key in run.data.metrics
    }
    expected = scalars(os.path.join(sessions.reference_board, "train"), purge=True)
    for name in ("loss", "mae"):
        steps = [s for s, _ in history[f"batch/{name}"]]
        assert steps == list(range(1, TOTAL + 1)), name  # each once, in order
        assert_same_reported(
            [v for _, v in history[f"batch/{name}"]],
            [v for _, v in expected[f"batch_{name}"]],
            f"batch/{name}",
        )
        assert [s for s, _ in history[f"epoch/{name}"]] == EPOCH_ENDS
    assert [s for s, _ in history["epoch/val_loss"]] == EPOCH_ENDS
    assert history["epoch"] == [(60, 0.0), (120, 1.0), (180, 2.0)]
    at = sessions.resumed_at
    assert history["colab_resume.resumed_at"] == [(at, float(at))]
    tags = run.data.tags
    assert tags["colab_resume.resumed_at"] == str(at)
    assert tags["colab_resume.sessions"] == "2"
    assert tags["colab_resume.session.2"] == f"resumed_at={at} logged_through={KILL_AT}"


# --- W&B -----------------------------------------------------------------------------


def test_wandb_one_run_id_monotonic_steps_and_the_resume_marked(sessions):
    record = identity.read_identity(Storage(sessions.run_dir), "wandb")
    assert record is not None and record["project"] == "trackers"
    files = wandb_files.offline_files(
        os.path.join(sessions.wandb_dir, "wandb"), record["run_id"]
    )
    assert len(files) == 2, files  # one offline folder per session, one id
    first, second = (wandb_files.history(path) for path in files)
    first_steps = [row["_step"] for row in first]
    second_steps = [row["_step"] for row in second]
    # The killed session got past the checkpoint it resumed from...
    assert max(first_steps) > sessions.resumed_at
    # ...and the second logged nothing the first had: one row per step.
    assert min(second_steps) == max(first_steps) + 1
    assert first_steps + second_steps == list(range(1, TOTAL + 1))
    assert second[0]["colab_resume/resumed_at"] == sessions.resumed_at
    assert all("colab_resume/resumed_at" not in row for row in first + second[1:])
    rows = {row["_step"]: row for row in first + second}
    expected = scalars(os.path.join(sessions.reference_board, "train"), purge=True)
    assert_same_reported(
        [rows[s]["batch/loss"] for s in range(1, TOTAL + 1)],
        [v for _, v in expected["batch_loss"]],
        "batch/loss",
    )
    assert [s for s in rows if "epoch/loss" in rows[s]] == EPOCH_ENDS


# --- the parts, without training -----------------------------------------------------


class FakeSink:
    def __init__(self, through: dict[str, int]) -> None:
        self.through, self.logged, self.marks = through, [], []

    def logged_through(self) -> dict[str, int]:
        return self.through

    def log(self, metrics, step):
        self.logged.append((step, sorted(metrics)))

    def resumed(self, step, logged_through):
        self.marks.append((step, logged_through))


def test_step_log_leaves_out_what_an_earlier_session_logged_per_metric():
    # The killed session logged batch metrics through step 9, the epoch's
    # metrics (step 8) too; it resumes from the checkpoint of step 5.
    sink = FakeSink({"batch/loss": 9, "epoch/loss": 8, "epoch": 8})
    log = StepLog(sink, update_freq=1)
    log.start(5)
    assert sink.marks == [(5, 9)]
    for _ in range(5):
        log.batch_end({"loss": 1.0})
    log.epoch_end(1, {"loss": 1.0})
    assert sink.logged == [(10, ["batch/loss"]), (10, ["epoch", "epoch/loss"])]


def test_step_log_one_step_for_every_metric():
    sink = FakeSink({EVERY_METRIC: 6})
    log = StepLog(sink, update_freq=2)
    log.start(0)  # no checkpoint before the death: from 0 again, marked
    assert sink.marks == [(0, 6)]
    for _ in range(8):
        log.batch_end({"loss": 1.0, "name": "not a number"})
    assert sink.logged == [(8, ["batch/loss"])]


def test_step_log_refuses_a_bad_update_freq():
    with pytest.raises(ValueError, match="update_freq"):
        StepLog(FakeSink({}), update_freq=0)
    with pytest.raises(ValueError, match="update_freq"):
        StepLog(FakeSink({}), update_freq="batch")


def test_two_sessions_racing_agree_on_one_identity(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    made = []

    def make(name):
        def create():
            made.append(name)
            # The other session's record lands between our read and our write.
            if name == "second":
                identity.claim_identity(storage, "x", lambda: {"id": "first"})
            return {"id": name}

        return create

    winner, created = identity.claim_identity(storage, "x", make("second"))
    assert winner == {"id": "first"} and created is False
    again, created = identity.claim_identity(storage, "x", make("third"))
    assert again == {"id": "first"} and created is False
    assert made == ["second"]  # a recorded identity is never made again


@pytest.mark.parametrize(
    ("module", "call"), [("mlflow", "mlflow_run"), ("wandb", "wandb_run")]
)
def test_a_missing_tracker_names_its_pip_line(tmp_path, monkeypatch, module, call):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if absent
    agent = types.SimpleNamespace(run_dir=str(tmp_path), options=None)
    with pytest.raises(ImportError, match=f"pip install {module}"):
        getattr(colab_resume.trackers, call)(agent)


def test_importing_the_trackers_imports_no_tracker_and_no_keras():
    code = (
        "import sys, colab_resume as cr; cr.trackers.tensorboard; "
        "print(sorted(m for m in ('keras', 'mlflow', 'wandb', 'tensorflow') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    ).stdout
    assert json.loads(out.strip().replace("'", '"')) == []


# --- a recorded identity is data, not proof ------------------------------------------


def open_run_dir(path) -> Storage:
    """A run directory whose first session opened (run.json) and closed."""
    from colab_resume.heartbeat import RunSession, SessionOptions

    storage = Storage(str(path))
    RunSession.open(storage, SessionOptions(heartbeat_seconds=5)).close()
    return storage


@pytest.mark.parametrize("planted", ["untagged", "another_run_dir", "other_experiment"])
def test_a_planted_mlflow_record_is_not_reused(tmp_path, mlflow_server, planted):
    """trackers/mlflow.json names an MLflow run that is not this training
    run's: someone else's (no tag), another run directory's (its tag names
    another run_id), or this run's own but in another experiment than the
    one asked for. The session refuses it by name, makes a new MLflow run,
    records it, and leaves the planted one as it was; the next session
    reuses the new one."""
    import mlflow

    client = mlflow.MlflowClient(mlflow_server)
    storage = open_run_dir(tmp_path / "run")
    own_id = identity.run_id_of(storage)
    name = f"planted-{planted}"
    asked = client.get_experiment_by_name(name)
    asked_id = asked.experiment_id if asked else client.create_experiment(name)
    elsewhere = client.get_experiment_by_name("elsewhere")
    elsewhere_id = (
        elsewhere.experiment_id if elsewhere else client.create_experiment("elsewhere")
    )
    tags, where = {
        "untagged": ({"owner": "someone else"}, asked_id),
        "another_run_dir": ({"colab_resume.run_id": "0" * 32}, asked_id),
        "other_experiment": ({"colab_resume.run_id": own_id}, elsewhere_id),
    }[planted]
    theirs = client.create_run(where, tags=tags).info.run_id
    storage.write_json(
        identity.record_path("mlflow"),
        {"run_id": theirs, "experiment_id": where, "tracking_uri": mlflow_server},
    )
    agent = colab_resume.Agent(str(tmp_path / "run"))
    with colab_resume.trackers.mlflow_run(
        agent, experiment=name, tracking_uri=mlflow_server
    ) as run:
        assert run.created and run.run_id != theirs
    refused = agent.events.recent(kind="tracker.refused")
    assert len(refused) == 1 and theirs in refused[0].message, refused
    left = client.get_run(theirs)
    assert left.info.status == "RUNNING"  # never ended FINISHED by this session
    untouched = {k: v for k, v in left.data.tags.items() if k != "mlflow.runName"}
    assert untouched == tags
    ours = client.get_run(run.run_id)
    assert ours.info.experiment_id == asked_id
    assert ours.data.tags["colab_resume.run_id"] == own_id
    assert identity.read_identity(storage, "mlflow")["run_id"] == run.run_id
    again_agent = colab_resume.Agent(str(tmp_path / "run"))
    with colab_resume.trackers.mlflow_run(
        again_agent, experiment=name, tracking_uri=mlflow_server
    ) as again:
        assert again.run_id == run.run_id and not again.created
    assert not again_agent.events.recent(kind="tracker.refused")


def test_the_mlflow_record_keeps_no_password_of_the_tracking_uri(
    tmp_path, mlflow_server
):
    """A tracking URI with userinfo and a query: the record keeps its host,
    port and path only."""
    storage = open_run_dir(tmp_path / "run")
    host = mlflow_server.split("://", 1)[1]
    uri = f"http://alice:pw-S3cret-value@{host}"
    agent = colab_resume.Agent(str(tmp_path / "run"))
    with colab_resume.trackers.mlflow_run(agent, experiment="uri", tracking_uri=uri):
        pass
    record = identity.read_identity(storage, "mlflow")
    assert record["tracking_uri"] == mlflow_server, record
    assert identity.safe_uri(f"{mlflow_server}/x?token=T0ken#frag") == (
        f"{mlflow_server}/x"
    )


def test_a_damaged_wandb_record_is_reported_not_trusted(tmp_path):
    """A real offline W&B file (written by wandb itself) with one byte
    flipped inside the history record of step 20: that record fails its
    checksum, is left out and said; every other row reads as written."""
    pytest.importorskip("wandb")
    script = (
        "import wandb\n"
        f"run = wandb.init(project='crc', dir={str(tmp_path)!r})\n"
        "for step in range(1, 31):\n"
        "    run.log({'loss': step / 10}, step=step)\n"
        "run.finish()\n"
    )
    subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, **ENV}, check=True
    )
    [path] = [
        os.path.join(folder, name)
        for folder, _, names in os.walk(tmp_path)
        for name in names
        if name.endswith(".wandb") and "latest-run" not in folder
    ]
    assert [row["_step"] for row in wandb_files.history(path)] == list(range(1, 31))
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = bytearray(f.read())
    for offset, kind, chunk, intact in wandb_files.frames(bytes(data)):
        record = wandb_internal_pb2.Record()
        assert intact
        if kind != 1:
            continue
        record.ParseFromString(chunk)
        steps = [
            wandb_files._value(item)
            for item in record.history.item
            if "/".join(p for p in (item.key, *item.nested_key) if p) == "_step"
        ]
        if record.WhichOneof("record_type") == "history" and steps == [20]:
            data[offset + 7 + len(chunk) // 2] ^= 0x40
            break
    else:
        raise AssertionError("no history record of step 20 in the file")
    with open(path, "wb") as f:
        f.write(data)
    damage: list[str] = []
    rows = wandb_files.history(path, damage)
    assert [row["_step"] for row in rows] == [s for s in range(1, 31) if s != 20]
    assert len(damage) == 1 and "fails its checksum" in damage[0], damage


@pytest.mark.parametrize("planted", ["someone_elses", "other_project"])
def test_a_planted_wandb_record_is_not_reused(tmp_path, monkeypatch, planted):
    """trackers/wandb.json names a W&B run that is not this training run's:
    an offline run someone else wrote (its files carry no colab_resume/run_id
    of this run directory), or a run in another project than the one
    asked for. The session draws a new id and says which it refused."""
    pytest.importorskip("wandb")
    for name, value in QUIET_ENV.items():
        monkeypatch.setenv(name, value)
    theirs = "someoneelse0000a"
    script = (
        "import wandb\n"
        f"run = wandb.init(id={theirs!r}, project='p', dir={str(tmp_path)!r})\n"
        "run.log({'loss': 1.0}, step=1)\n"
        "run.finish()\n"
    )
    subprocess.run([sys.executable, "-c", script], env={**os.environ}, check=True)
    assert wandb_files.offline_files(str(tmp_path / "wandb"), theirs)
    storage = open_run_dir(tmp_path / "run")
    project = "p" if planted == "someone_elses" else "elsewhere"
    storage.write_json(
        identity.record_path("wandb"),
        {"run_id": theirs, "project": project, "entity": None},
    )
    agent = colab_resume.Agent(str(tmp_path / "run"))
    run = colab_resume.trackers.wandb_run(agent, project="p", dir=str(tmp_path))
    assert run.created and run.run_id != theirs
    refused = agent.events.recent(kind="tracker.refused")
    assert len(refused) == 1 and theirs in refused[0].message, refused
    assert identity.read_identity(storage, "wandb")["run_id"] == run.run_id


def test_a_tensorboard_log_dir_is_recorded_without_userinfo_or_query():
    """The log directory a user passes may be a URL with credentials in it:
    the record keeps the URL without them; a local path stays as it is."""
    recordable = tensorboard_log._recordable
    assert recordable("gs://alice:pw-S3cret@bucket/tb?sig=x") == "gs://bucket/tb"
    assert recordable("/content/tb #1?") == "/content/tb #1?"


@pytest.mark.parametrize(
    ("answer", "reused"),
    [("ours", True), ("another_run_dir", False), ("no_such_run", True)],
)
def test_online_wandb_reuse_asks_w_and_b_whose_run_it_is(
    tmp_path, monkeypatch, answer, reused
):
    """Online, the recorded id is reused only if W&B's API shows the run's
    config colab_resume/run_id is this run directory's, or W&B has no run of
    that id (nobody's). No W&B server can run here: ``wandb.Api`` is a
    stand-in answering as the real one does (a run with a config, or
    ``RunNotFoundError``)."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    storage = open_run_dir(tmp_path / "run")
    own = identity.run_id_of(storage)
    recorded = "recordedid00000a"
    storage.write_json(
        identity.record_path("wandb"),
        {"run_id": recorded, "project": "p", "entity": "team"},
    )

    class RunNotFoundError(ValueError):
        pass

    class Api:
        default_entity = "team"

        def run(self, path):
            assert path == f"team/p/{recorded}", path
            if answer == "no_such_run":
                raise RunNotFoundError(f"Could not find run {path}")
            owner = own if answer == "ours" else "0" * 32
            return types.SimpleNamespace(config={"colab_resume/run_id": owner})

    monkeypatch.setattr(wandb, "Api", Api)
    agent = colab_resume.Agent(str(tmp_path / "run"))
    run = colab_resume.trackers.wandb_run(agent, project="p")
    assert (run.run_id == recorded) is reused
    assert bool(agent.events.recent(kind="tracker.refused")) is not reused

"""The Agent in one process: steering, refusals, bad input, the lighter path.

Real TensorFlow on the CPU (one device: no logical-device setup, so these
tests can share the pytest process) and real local run directories.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402

import colab_resume as cr  # noqa: E402
from colab_resume import rundir  # noqa: E402
from colab_resume.agent.keras_fit import ModelError  # noqa: E402
from colab_resume.data import DatasetError  # noqa: E402
from colab_resume.errors import RunInUseError  # noqa: E402
from colab_resume.heartbeat import RunSession, SessionOptions  # noqa: E402
from colab_resume.storage import Storage  # noqa: E402

X = np.random.RandomState(0).randn(128, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)


def build_model() -> keras.Model:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def make_dataset(epoch: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)


def agent_for(run_dir, **options) -> cr.Agent:
    defaults = dict(save_every_steps=4, heartbeat_seconds=0.5, prefer="cpu")
    return cr.Agent(str(run_dir), **{**defaults, **options})


class AtStep(keras.callbacks.Callback):
    """Calls ``action`` once, after global batch ``step`` (1-based) of this fit."""

    def __init__(self, step: int, action) -> None:
        super().__init__()
        self.step, self.action, self.seen = step, action, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.step:
            self.action()


def test_fit_completes_and_a_second_fit_returns_at_once(tmp_path):
    agent = agent_for(tmp_path / "run")
    history = agent.fit(
        build_model, make_dataset, epochs=2, steps_per_epoch=16, verbose=0
    )
    assert history.epoch == [0, 1] and len(history.history["loss"]) == 2
    assert agent.status().state == "COMPLETED"
    weights = [v.numpy() for v in agent.model.variables]

    again = agent_for(tmp_path / "run")
    history2 = again.fit(
        build_model, make_dataset, epochs=2, steps_per_epoch=16, verbose=0
    )
    assert history2.epoch == [0, 1]
    assert all(
        np.array_equal(a, v.numpy())
        for a, v in zip(weights, again.model.variables, strict=True)
    )
    assert again.events.recent(kind="run.already_completed")


def test_stop_checkpoints_and_the_next_fit_continues(tmp_path):
    agent = agent_for(tmp_path / "run", save_every_steps=100)
    agent.fit(
        build_model,
        make_dataset,
        epochs=2,
        steps_per_epoch=16,
        verbose=0,
        callbacks=[AtStep(5, agent.stop)],
    )
    status = agent.status()
    assert status.state == "DEAD" and status.holder_state == "stopped"
    assert status.checkpoint_step == 5  # saved at the step it stopped
    resumed = agent_for(tmp_path / "run", save_every_steps=100)
    resumed.fit(build_model, make_dataset, epochs=2, steps_per_epoch=16, verbose=0)
    assert resumed.checkpoints is not None
    assert resumed.events.recent(kind="checkpoint.restored")[0].step == 5
    assert resumed.status().state == "COMPLETED"


def test_save_now_and_pause_resume_from_another_thread(tmp_path):
    agent = agent_for(tmp_path / "run", save_every_steps=None, save_every_seconds=3600)
    paused = threading.Event()

    def pause_then_resume() -> None:
        agent.pause()
        threading.Timer(1.0, agent.resume).start()

    agent.events.subscribe(lambda e: paused.set() if e.kind == "run.paused" else None)
    agent.fit(
        build_model,
        make_dataset,
        epochs=1,
        steps_per_epoch=16,
        verbose=0,
        callbacks=[AtStep(3, agent.save_now), AtStep(9, pause_then_resume)],
    )
    assert paused.is_set()
    committed = [e.step for e in agent.events.recent(kind="checkpoint.committed")]
    assert 3 in committed and 9 in committed  # save_now, and the save on pause
    assert agent.events.recent(kind="run.resumed")


def test_live_run_is_refused_and_takeover_fences_it(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    holder = RunSession.open(storage, SessionOptions(heartbeat_seconds=0.3))
    try:
        with pytest.raises(RunInUseError, match="takeover=True"):
            agent_for(tmp_path / "run").fit(
                build_model, make_dataset, epochs=1, steps_per_epoch=4, verbose=0
            )
        agent = agent_for(tmp_path / "run", takeover=True)
        agent.fit(build_model, make_dataset, epochs=1, steps_per_epoch=4, verbose=0)
        assert agent.session.lease == 2
        with pytest.raises(cr.errors.FencedError):
            holder.fence()
    finally:
        holder.close()


def test_uncompiled_model_is_refused_with_the_fix(tmp_path):
    def uncompiled() -> keras.Model:
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

    with pytest.raises(ModelError, match=r"model.compile\(optimizer"):
        agent_for(tmp_path / "run").fit(
            uncompiled, make_dataset, epochs=1, steps_per_epoch=4, verbose=0
        )
    status = cr.inspect(str(tmp_path / "run"))
    assert status.state == "FAILED" and "ModelError" in status.detail


def test_dataset_that_is_not_a_dataset_is_refused_with_the_fix(tmp_path):
    with pytest.raises(DatasetError, match="tf.data.Dataset"):
        agent_for(tmp_path / "run").fit(
            build_model, lambda epoch: [X, Y], epochs=1, steps_per_epoch=4, verbose=0
        )


def test_short_dataset_names_steps_per_epoch(tmp_path):
    with pytest.raises(DatasetError, match="steps_per_epoch is 99"):
        agent_for(tmp_path / "run").fit(
            build_model, make_dataset, epochs=1, steps_per_epoch=99, verbose=0
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"save_every_steps": None, "save_every_seconds": None}, "no checkpoint would"),
        ({"keep": 0}, "keep must be an int >= 1"),
        ({"heartbeat_seconds": -1}, "heartbeat_seconds must be"),
        ({"prefer": "quantum"}, "prefer must be one of"),
        ({"storage_options": "anon"}, "storage_options must be a dict"),
        ({"reset_data_fingerprints": "yes"}, "reset_data_fingerprints must be True"),
        ({"max_recoveries": True}, "max_recoveries must be an int"),
        (
            {"heartbeat_seconds": 10, "dead_after_seconds": 5},
            r"dead_after_seconds \(5\) must be longer than heartbeat_seconds \(10\)",
        ),
    ],
)
def test_bad_options_name_the_field(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        cr.Agent(str(tmp_path / "run"), **options)


def test_a_misspelt_option_gets_did_you_mean(tmp_path):
    with pytest.raises(TypeError, match="Did you mean 'save_every_steps'"):
        cr.Agent(str(tmp_path / "run"), save_every_step=10)


def test_close_and_with_end_a_session_the_lighter_path_left_beating(tmp_path):
    with agent_for(tmp_path / "run") as agent:
        agent.restore(build_model())  # takes the run; no fit follows
        assert agent.status().state == "ALIVE"
    assert agent.status().state == "DEAD"  # stopped cleanly: taken at once
    again = agent_for(tmp_path / "run")
    again.restore(build_model())
    assert again.session is not None and again.session.lease == 2
    again.close()
    again.close()  # idempotent


def test_unknown_url_scheme(tmp_path):
    with pytest.raises(cr.errors.UnsupportedURLError, match="gs://bucket/path"):
        cr.Agent("ftp2://x/y")


def test_lighter_path_restore_and_callback(tmp_path):
    model = build_model()
    agent = agent_for(tmp_path / "run")
    start = agent.restore(model)
    assert (start.step, start.initial_epoch, start.skip) == (0, 0, 0)
    model.fit(
        make_dataset(0),
        epochs=1,
        steps_per_epoch=16,
        callbacks=[agent.callback()],
        verbose=0,
    )
    assert agent.status().state == "COMPLETED"
    assert Storage(str(tmp_path / "run")).exists(rundir.DONE_RECORD)

    other = agent_for(tmp_path / "other")
    fresh = build_model()
    other.restore(fresh)
    with pytest.raises(RuntimeError, match="restore"):
        agent_for(tmp_path / "third").callback()
    fresh.fit(
        make_dataset(0),
        epochs=2,
        steps_per_epoch=16,
        verbose=0,
        callbacks=[AtStep(6, other.stop), other.callback()],
    )
    later = agent_for(tmp_path / "other")
    start = later.restore(build_model())
    assert (start.step, start.initial_epoch, start.skip) == (6, 0, 6)
    later.session.close()

"""The Agent in one process: steering, refusals, bad input, the lighter path.

Real TensorFlow on the CPU (one device: no logical-device setup, so these
tests can share the pytest process) and real local run directories.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402
from support.toy import at_step  # noqa: E402
from support.toy import tiny_model as build_model  # noqa: E402

import colab_resume as cr  # noqa: E402
from colab_resume.agent.keras_fit import ModelError  # noqa: E402
from colab_resume.data import DatasetError  # noqa: E402
from colab_resume.errors import RunInUseError  # noqa: E402
from colab_resume.heartbeat import RunSession, SessionOptions  # noqa: E402
from colab_resume.protocol import rundir  # noqa: E402
from colab_resume.storage import Storage  # noqa: E402

X = np.random.RandomState(0).randn(128, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)


def make_dataset(epoch: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)


def agent_for(run_dir, **options) -> cr.Agent:
    defaults = dict(save_every_steps=4, heartbeat_seconds=0.5, prefer="cpu")
    return cr.Agent(str(run_dir), **{**defaults, **options})


def test_fit_completes_and_a_second_fit_returns_at_once(tmp_path):
    agent = agent_for(tmp_path / "run")
    history = agent.fit(
        build_model, make_dataset, epochs=2, steps_per_epoch=16, verbose=0
    )
    assert history.epoch == [0, 1] and len(history.history["loss"]) == 2
    assert agent.status().state == "COMPLETED"
    # The last beat names the final checkpoint (the CLI and panel read it).
    beat = Storage(str(tmp_path / "run")).read_json(rundir.heartbeat_path(1))
    assert beat["state"] == "completed" and beat["checkpoint_step"] == 32
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


def test_fit_leaves_no_keras_shuffle_warning_under_the_cell(tmp_path):
    # Keras warns that its default shuffle=True is ignored for a Dataset;
    # the agent's datasets order themselves and it says shuffle=False.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent_for(tmp_path / "run").fit(
            build_model, make_dataset, epochs=1, steps_per_epoch=4, verbose=0
        )
    assert not [w for w in caught if "shuffle" in str(w.message)], caught


def test_stop_checkpoints_and_the_next_fit_continues(tmp_path):
    agent = agent_for(tmp_path / "run", save_every_steps=100)
    history = agent.fit(
        build_model,
        make_dataset,
        epochs=2,
        steps_per_epoch=16,
        verbose=0,
        callbacks=[at_step(5, agent.stop)],
    )
    # A stop is visible, not a silent half-trained "finished" model.
    assert history.stopped is True and agent.stopped is True
    [stopped] = agent.events.recent(kind="run.stopped")
    assert stopped.level == "warning" and "Run the same code again" in stopped.message
    status = agent.status()
    assert status.state == "STOPPED" and status.holder_state == "stopped"
    assert status.checkpoint_step == 5  # saved at the step it stopped
    resumed = agent_for(tmp_path / "run", save_every_steps=100)
    history = resumed.fit(
        build_model, make_dataset, epochs=2, steps_per_epoch=16, verbose=0
    )
    assert history.stopped is False and resumed.stopped is False
    assert resumed.status().checkpoint_step == 32
    assert resumed.events.recent(kind="checkpoint.restored")[0].step == 5
    [said] = resumed.events.recent(kind="run.resumed_at")
    assert said.message.startswith(
        "resumed at step 5 (epoch 1, after 5 of its 16 steps) from the checkpoint"
    )
    assert resumed.status().state == "COMPLETED"


def test_a_resume_says_where_it_resumed_above_the_progress_bar(tmp_path, capsys):
    """In the epoch numbers Keras prints right below it ("Epoch 2/2")."""
    agent = agent_for(tmp_path / "run", save_every_steps=100)
    agent.fit(
        build_model,
        make_dataset,
        epochs=2,
        steps_per_epoch=16,
        verbose=0,
        callbacks=[at_step(21, agent.stop)],
    )
    capsys.readouterr()
    resumed = agent_for(tmp_path / "run")
    resumed.fit(build_model, make_dataset, epochs=2, steps_per_epoch=16, verbose=2)
    printed = capsys.readouterr().out
    said = "resumed at step 21 (epoch 2, after 5 of its 16 steps) from the checkpoint"
    assert printed.count(said) == 1, printed
    assert "Epoch 2/2" in printed.split(said, 1)[1] and "Epoch 1/2" not in printed
    [restored] = resumed.events.recent(kind="checkpoint.restored")
    assert "(saved in epoch 2)" in restored.message


def test_one_slash_after_gs_is_refused_with_the_fix():
    with pytest.raises(cr.errors.UnsupportedURLError, match="did you mean 'gs://b/x'"):
        cr.Agent("gs:/b/x")


def test_a_batch_that_cannot_be_split_over_the_replicas_is_named():
    from colab_resume.agent.epochs import check_global_batch

    uneven = tf.data.Dataset.from_tensor_slices((X, Y)).batch(17)
    with pytest.raises(DatasetError, match="batches of 17 examples.*2 replicas"):
        check_global_batch(uneven, 2, epoch=0)
    check_global_batch(uneven, 1, epoch=0)  # one replica: anything goes
    check_global_batch(tf.data.Dataset.from_tensor_slices((X, Y)).batch(16), 2, 0)


def test_restore_without_keras_fails_before_touching_the_run(tmp_path):
    """Keras hidden from the import system, as on a machine without it."""
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    code = (
        "import sys; sys.modules['keras'] = None\n"
        "import colab_resume as cr\n"
        f"agent = cr.Agent({str(run_dir)!r}, prefer='cpu')\n"
        "agent.restore(object())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "Keras is not installed" in result.stderr
    assert "pip install 'keras>=3'" in result.stderr
    assert not run_dir.exists()  # no lease taken, no FAILED run left behind


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
        callbacks=[at_step(3, agent.save_now), at_step(9, pause_then_resume)],
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
        assert agent.status().lease == 2
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
    """[X, Y] is two batches of whole arrays: too few, and the fix is named."""
    with pytest.raises(
        DatasetError, match=r"A list is read as a list of batches.*tf.data.Dataset"
    ):
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
    assert agent.status().state == "STOPPED"  # a clean end: taken at once
    again = agent_for(tmp_path / "run")
    again.restore(build_model())
    assert again.status().lease == 2
    again.close()
    again.close()  # idempotent


def test_lighter_path_saves_the_optimizer_a_recompile_gave(tmp_path):
    """The multi-fit recipe with a recompile between the phases: the
    checkpoints of phase 2 hold phase 2's optimizer, not phase 1's."""

    def compiled(model: keras.Model, learning_rate: float) -> keras.Model:
        model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="mse")
        return model

    def phase(model: keras.Model, agent: cr.Agent, epoch: int) -> None:
        model.fit(
            make_dataset(epoch),
            initial_epoch=epoch,
            epochs=epoch + 1,
            steps_per_epoch=16,
            callbacks=[agent.callback()],
            verbose=0,
        )

    model = compiled(build_model(), 1e-2)
    agent = agent_for(tmp_path / "run")
    agent.restore(model, epochs=2)
    phase(model, agent, 0)
    compiled(model, 1e-4)  # fine-tuning: a new Adam, as many variables
    phase(model, agent, 1)
    assert agent.status().state == "COMPLETED"

    fresh = compiled(build_model(), 0.5)
    later = agent_for(tmp_path / "run")
    assert later.restore(fresh).step == 32
    later.close()
    assert int(fresh.optimizer.iterations.numpy()) == 16  # phase 2's steps
    assert np.isclose(fresh.optimizer.learning_rate.numpy(), 1e-4)
    for index, (trained, saved) in enumerate(
        zip(model.optimizer.variables, fresh.optimizer.variables, strict=True)
    ):
        assert np.array_equal(trained.numpy(), saved.numpy()), index


def test_unknown_url_scheme(tmp_path):
    with pytest.raises(cr.errors.UnsupportedURLError, match="gs://bucket/path"):
        cr.Agent("ftp2://x/y")


def test_lighter_path_restore_and_callback(tmp_path):
    model = build_model()
    agent = agent_for(tmp_path / "run")
    start = agent.restore(model)
    assert isinstance(start, cr.StartPoint)
    assert (start.step, start.initial_epoch, start.skip) == (0, 0, 0)
    assert isinstance(agent.callback(), cr.ResumeCallback)
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
        callbacks=[at_step(6, other.stop), other.callback()],
    )
    later = agent_for(tmp_path / "other")
    start = later.restore(build_model())
    assert (start.step, start.initial_epoch, start.skip) == (6, 0, 6)
    later.close()


def test_where_the_run_stands_reaches_the_cell_without_a_panel(tmp_path, capsys):
    """Completed, extended, cannot go back: info events, which logging at its
    default level never prints, are printed under the cell."""
    run = tmp_path / "run"

    def fit(epochs: int) -> str:
        capsys.readouterr()
        agent_for(run).fit(
            build_model, make_dataset, epochs=epochs, steps_per_epoch=16, verbose=0
        )
        return capsys.readouterr().out

    assert "colab_resume: run completed" in fit(1)
    extended = fit(2)
    assert "colab_resume: the run had completed at step 16; continuing" in extended
    assert "colab_resume: run completed" in extended
    assert "it cannot go back: restored its final state (step 32)" in fit(1)


def test_the_console_leaves_to_a_panel_or_the_users_logging_what_they_show(
    capsys, caplog
):
    import io

    from colab_resume.agent.console import ConsoleSink
    from colab_resume.events import EventLog

    out = io.StringIO()
    events, sink = EventLog(), ConsoleSink(out)
    events.subscribe(sink)
    events.emit("checkpoint.committed", "committed step-4")  # detail: not said
    events.emit("run.stopped", "stopped", level="warning")  # logging says it
    events.emit("run.completed", "run completed")
    assert out.getvalue() == "colab_resume: run completed\n"
    sink.panel_shown = True
    events.emit("run.completed", "again")
    sink.panel_shown = False
    with caplog.at_level("INFO", logger="colab_resume"):  # logging shows info
        events.emit("run.completed", "once more")
    assert out.getvalue() == "colab_resume: run completed\n"
    assert "once more" in caplog.text

"""What ``agent.fit`` says, or refuses, about changes between runs and odd inputs.

Real TensorFlow on the CPU and real local run directories, in this process:
no warning where nothing is lost, a refusal with the fix where a resume
could not be coherent.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402
from support.toy import at_step  # noqa: E402

import colab_resume as cr  # noqa: E402
from colab_resume.agent.epoch_length import EpochLengthChangedError  # noqa: E402
from colab_resume.agent.keras_fit import ModelError  # noqa: E402

X = np.random.RandomState(0).randn(128, 4).astype("float32")
LABELS = (X.sum(axis=1, keepdims=True) > 0).astype("float32")


def classifier(metrics: tuple[str, ...] = ("accuracy",)) -> keras.Model:
    keras.utils.set_random_seed(0)  # every run starts from the same weights
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")]
    )
    model.compile(optimizer="sgd", loss="binary_crossentropy", metrics=list(metrics))
    return model


def make_dataset(epoch: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, LABELS)).batch(8)


def agent_for(run_dir, **options) -> cr.Agent:
    defaults = dict(save_every_steps=100, heartbeat_seconds=0.5, prefer="cpu")
    return cr.Agent(str(run_dir), **{**defaults, **options})


def stopped_at(
    run_dir, step: int, build=classifier, steps_per_epoch: int = 16, **options
):
    agent = agent_for(run_dir, **options)
    agent.fit(
        build,
        make_dataset,
        epochs=2,
        steps_per_epoch=steps_per_epoch,
        verbose=0,
        callbacks=[at_step(step, agent.stop)],
    )
    assert agent.stopped


def test_resume_with_accuracy_restores_its_metrics_without_a_warning(tmp_path, caplog):
    """Keras builds compile metrics on the first step, so the rebuilt model
    lacks them at the restore; agent.fit puts them back itself, so saying
    they are "not restored" was a false alarm."""
    whole = agent_for(tmp_path / "whole").fit(
        classifier, make_dataset, epochs=2, steps_per_epoch=16, verbose=0
    )
    stopped_at(tmp_path / "run", 5)
    with caplog.at_level(logging.WARNING):
        resumed = agent_for(tmp_path / "run")
        history = resumed.fit(
            classifier, make_dataset, epochs=2, steps_per_epoch=16, verbose=0
        )
    assert resumed.events.recent(kind="checkpoint.restored")[0].step == 5
    assert history.history == whole.history  # the metrics were restored
    alarms = [r.getMessage() for r in caplog.records if "metric" in r.getMessage()]
    assert alarms == []
    assert not [e for e in resumed.events.recent() if e.level == "warning"]


def test_metrics_that_do_not_fit_the_resumed_epoch_are_still_named(tmp_path):
    stopped_at(tmp_path / "run", 5)
    resumed = agent_for(tmp_path / "run")
    resumed.fit(
        lambda: classifier(("accuracy", "mae")),
        make_dataset,
        epochs=2,
        steps_per_epoch=16,
        verbose=0,
    )
    [warning] = [e for e in resumed.events.recent(kind="fit.warning")]
    assert "metric variables" in warning.message
    assert "restart from the resumed step" in warning.message


def test_a_changed_steps_per_epoch_is_refused_with_the_fix(tmp_path):
    stopped_at(tmp_path / "run", 20)  # epoch 1, step 4 of 16
    with pytest.raises(EpochLengthChangedError, match="steps_per_epoch=16 to"):
        agent_for(tmp_path / "run").fit(
            classifier, make_dataset, epochs=4, steps_per_epoch=12, verbose=0
        )
    # Nothing trained under the wrong length: the same call with the old
    # one continues, and History has one entry per epoch asked for.
    history = agent_for(tmp_path / "run").fit(
        classifier, make_dataset, epochs=4, steps_per_epoch=16, verbose=0
    )
    assert history.epoch == [0, 1, 2, 3] and len(history.history["loss"]) == 4


def test_a_model_passed_as_build_model_is_named_with_the_fix(tmp_path):
    with pytest.raises(TypeError, match=r"pass build_model, not build_model\(\)"):
        agent_for(tmp_path / "run").fit(
            classifier(), make_dataset, epochs=1, steps_per_epoch=4, verbose=0
        )


def test_a_model_built_outside_the_strategy_scope_is_named(tmp_path):
    # Under a strategy with a scope (one device alone trains under TensorFlow's
    # default strategy, which has none to be outside of).
    pinned = tf.distribute.OneDeviceStrategy("/cpu:0")
    built_before = classifier()
    with pytest.raises(ModelError, match="outside the strategy scope"):
        agent_for(tmp_path / "run", strategy=pinned).fit(
            lambda: built_before, make_dataset, epochs=1, steps_per_epoch=4, verbose=0
        )
    assert "ModelError" in cr.inspect(str(tmp_path / "run")).detail


def test_a_run_from_one_device_strategy_resumes_under_the_default_and_says_so(
    tmp_path,
):
    """One device trains under TensorFlow's default strategy, as plain Keras
    does; a run an earlier version trained inside ``OneDeviceStrategy`` (here
    passed as the user's) resumes with the change named."""
    stopped_at(tmp_path / "run", 5, strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
    resumed = agent_for(tmp_path / "run")
    resumed.fit(classifier, make_dataset, epochs=2, steps_per_epoch=16, verbose=0)
    assert resumed.events.recent(kind="checkpoint.restored")[0].step == 5
    [changed] = resumed.events.recent(kind="run.runtime_changed")
    assert changed.data["changes"] == [
        "distribution.kind OneDeviceStrategy -> default (one device)"
    ]
    assert changed.data["now"]["distribution"]["replicas"] == 1
    [built] = resumed.events.recent(kind="runtime.strategy")
    assert built.message.startswith(
        "training under TensorFlow's default strategy (one device, as plain Keras), "
        "built by the agent"
    ), built.message

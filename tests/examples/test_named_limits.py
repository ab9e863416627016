"""What cannot be resumed is named before it diverges; what conflicts is refused.

In one process (no death needed to see a warning): real TensorFlow on the
CPU, real local run directories. The 2-replica checks run in a process of
their own, since the CPU is split into logical devices once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from support.processes import python_path

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402

import colab_resume as cr  # noqa: E402
from colab_resume.agent.callback_state import CallbackConflictError  # noqa: E402

X = np.random.RandomState(0).randn(64, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)


class LegacyNoise(keras.layers.Layer):
    """Noise the way older examples add it: a stateful TF op."""

    def call(self, inputs, training=False):
        return inputs + 0.01 * tf.random.normal(tf.shape(inputs))


class CountingCallback(keras.callbacks.Callback):
    """Instance state, and no get_resume_state / set_resume_state."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1


def make_dataset(epoch: int, skip: int = 0) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(8).skip(skip)


def fit(
    run_dir, layers=list, callbacks=(), agent_options=None, **fit_options
) -> cr.Agent:
    """``agent.fit`` of a small Dense model with ``layers()`` in front."""

    def build_model() -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), *layers(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        return model

    agent = cr.Agent(
        str(run_dir), save_every_steps=4, heartbeat_seconds=0.5, **(agent_options or {})
    )
    callbacks = callbacks(agent) if callable(callbacks) else list(callbacks)
    agent.fit(
        build_model,
        make_dataset,
        epochs=2,
        steps_per_epoch=8,
        callbacks=callbacks,
        verbose=0,
        **fit_options,
    )
    return agent


def warnings_of(agent: cr.Agent) -> list[str]:
    return [e.message for e in agent.events.recent(kind="fit.warning")]


def test_a_stateful_tf_random_op_in_the_step_is_named_once(tmp_path):
    warnings = warnings_of(
        fit(tmp_path / "run", lambda: [LegacyNoise(name="legacy_noise")])
    )
    assert len(warnings) == 1, warnings
    assert "RandomStandardNormal" in warnings[0]
    assert "legacy_noise" in warnings[0]  # where it was created
    assert "SeedGenerator" in warnings[0]  # the fix


def test_keras_random_ops_and_dropout_raise_no_warning(tmp_path):
    layers = lambda: [keras.layers.Dropout(0.2), keras.layers.GaussianNoise(0.1)]  # noqa: E731
    assert warnings_of(fit(tmp_path / "run", layers)) == []


def test_a_user_callback_with_state_and_no_protocol_is_named(tmp_path):
    warnings = warnings_of(fit(tmp_path / "run", callbacks=[CountingCallback()]))
    assert len(warnings) == 1, warnings
    assert "CountingCallback" in warnings[0] and "batches" in warnings[0]
    assert "get_resume_state" in warnings[0]


def test_backup_and_restore_is_refused_before_anything_is_written(tmp_path):
    callback = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    with pytest.raises(CallbackConflictError, match="Remove it from callbacks"):
        fit(tmp_path / "run", callbacks=[callback])
    assert not (tmp_path / "run").exists()


class DrawEachBatch(keras.callbacks.Callback):
    """Draws from a generator the model does not reach (say, for augmentation)."""

    def __init__(self, generator, stop_at=None, agent=None) -> None:
        super().__init__()
        self.generator, self.stop_at, self.agent = generator, stop_at, agent

    def get_resume_state(self) -> dict:
        return {}

    def set_resume_state(self, state: dict) -> None:
        pass

    def on_train_batch_end(self, batch, logs=None):
        self.generator.normal((2,))
        if self.agent is not None and batch == self.stop_at:
            self.agent.stop()


def fit_with_extra(run_dir, generator, stop_at=None, extra=True) -> cr.Agent:
    return fit(
        run_dir,
        callbacks=lambda agent: [DrawEachBatch(generator, stop_at, agent)],
        extra_state={"augment_rng": generator} if extra else None,
    )


def test_extra_state_travels_with_the_checkpoint_and_a_mismatch_is_named(tmp_path):
    reference = tf.random.Generator.from_seed(3)
    fit_with_extra(tmp_path / "reference", reference)

    stopped = tf.random.Generator.from_seed(3)
    fit_with_extra(tmp_path / "run", stopped, stop_at=5)  # stop() mid-epoch 0
    fresh = tf.random.Generator.from_seed(3)  # what a new process would build
    fit_with_extra(tmp_path / "run", fresh)
    assert np.array_equal(fresh.state.numpy(), reference.state.numpy())

    with pytest.raises(cr.StructureMismatchError, match="extra_augment_rng"):
        fit_with_extra(tmp_path / "run", tf.random.Generator.from_seed(3), extra=False)


def run_with_jitter(run_dir, **agent_options) -> cr.Agent:
    """``agent.run`` of a custom step that adds ``tf.random.uniform`` noise."""

    def build_state() -> dict:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        return {"model": model, "optimizer": keras.optimizers.SGD(0.01)}

    def train_step(state, batch):
        features, labels = batch
        noisy = features + tf.random.uniform(tf.shape(features), name="jitter")
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(state["model"](noisy) - labels))
        variables = state["model"].trainable_variables
        grads = tape.gradient(loss, variables)
        state["optimizer"].apply_gradients(zip(grads, variables, strict=True))
        return {"loss": loss}

    agent = cr.Agent(
        str(run_dir), save_every_steps=4, heartbeat_seconds=0.5, **agent_options
    )
    agent.run(build_state, make_dataset, train_step, total_steps=8, steps_per_epoch=8)
    return agent


def test_a_stateful_tf_random_op_in_a_custom_train_step_is_named(tmp_path):
    [warning] = warnings_of(run_with_jitter(tmp_path / "run"))
    assert "RandomUniform" in warning and "jitter" in warning


def two_replica_warnings(root: str) -> None:
    """In a fresh process: the warnings of ``fit`` and ``run`` on 2 CPU
    replicas, printed as one JSON line."""
    replicas = {"prefer": "cpu", "cpu_replicas": 2}
    legacy = fit(
        os.path.join(root, "fit"),
        lambda: [LegacyNoise(name="legacy_noise")],
        agent_options=replicas,
    )
    keras_noise = fit(
        os.path.join(root, "keras"),
        lambda: [keras.layers.Dropout(0.2), keras.layers.GaussianNoise(0.1)],
        agent_options=replicas,
    )
    out = {
        "replicas": legacy.model.distribute_strategy.num_replicas_in_sync,
        "fit": warnings_of(legacy),
        "keras": warnings_of(keras_noise),
        "run": warnings_of(run_with_jitter(os.path.join(root, "run"), **replicas)),
    }
    print("RESULT " + json.dumps(out), flush=True)


@pytest.fixture(scope="module")
def on_two_replicas(tmp_path_factory) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    code = "import sys, test_named_limits as t; t.two_replica_warnings(sys.argv[1])"
    root = str(tmp_path_factory.mktemp("replicas"))
    done = subprocess.run(
        [sys.executable, "-c", code, root],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PYTHONPATH": python_path(here),  # this module, imported there
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "CUDA_VISIBLE_DEVICES": "",
        },
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["replicas"] == 2
    return out


def test_a_stateful_tf_random_op_is_named_in_fit_on_two_replicas(on_two_replicas):
    # MirroredStrategy traces the step in a thread per replica.
    [warning] = on_two_replicas["fit"]
    assert "RandomStandardNormal" in warning and "legacy_noise" in warning
    assert "replica_1/" not in warning  # each op once, not once per replica
    assert on_two_replicas["keras"] == []


def test_a_stateful_tf_random_op_is_named_in_run_on_two_replicas(on_two_replicas):
    [warning] = on_two_replicas["run"]
    assert "RandomUniform" in warning and "jitter" in warning
    assert "replica_1/" not in warning

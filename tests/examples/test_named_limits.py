"""What cannot be resumed is named before it diverges; what conflicts is refused.

In one process (no death needed to see a warning): real TensorFlow on the
CPU, real local run directories.
"""

from __future__ import annotations

import numpy as np
import pytest

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


def fit(run_dir, layers=list, callbacks=(), **fit_options) -> cr.Agent:
    """``agent.fit`` of a small Dense model with ``layers()`` in front."""

    def build_model() -> keras.Model:
        model = keras.Sequential([keras.Input((4,)), *layers(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        return model

    agent = cr.Agent(str(run_dir), save_every_steps=4, heartbeat_seconds=0.5)
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


def test_a_stateful_tf_random_op_in_a_custom_train_step_is_named(tmp_path):
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

    agent = cr.Agent(str(tmp_path / "run"), save_every_steps=4, heartbeat_seconds=0.5)
    agent.run(build_state, make_dataset, train_step, total_steps=8, steps_per_epoch=8)
    [warning] = [e.message for e in agent.events.recent(kind="fit.warning")]
    assert "RandomUniform" in warning and "jitter" in warning

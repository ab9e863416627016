"""Ctrl-C at an epoch's end loses nothing: the next run records that epoch.

In one process: the interrupt is raised from a callback during the
validation that ends epoch 1, after its last batch, before its History entry
(a real Ctrl-C lands there too; raising it makes the instant exact).
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402
from support.toy import tiny_model as build_model  # noqa: E402

import colab_resume as cr  # noqa: E402

X = np.random.RandomState(0).randn(64, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)
VALIDATION = tf.data.Dataset.from_tensor_slices((X[:16], Y[:16])).batch(8)


class CtrlCInValidation(keras.callbacks.Callback):
    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch, self.current = epoch, None

    def get_resume_state(self) -> dict:
        return {}

    def set_resume_state(self, state: dict) -> None:
        pass

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_test_begin(self, logs=None):
        if self.current == self.epoch:
            raise KeyboardInterrupt


def make_dataset(epoch: int, skip: int = 0) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(8).skip(skip)


def fit(run_dir, callbacks) -> keras.callbacks.History:
    agent = cr.Agent(str(run_dir), save_every_steps=3, heartbeat_seconds=0.5)
    return agent.fit(
        build_model,
        make_dataset,
        epochs=3,
        steps_per_epoch=8,
        callbacks=callbacks,
        validation_data=VALIDATION,
        verbose=0,
    )


def test_ctrl_c_between_an_epochs_last_batch_and_its_end_drops_no_epoch(tmp_path):
    with pytest.raises(KeyboardInterrupt) as caught:
        fit(tmp_path / "run", [CtrlCInValidation(epoch=1)])
    # One line for the user instead of TensorFlow's traceback.
    assert str(caught.value).startswith("interrupted at step 16: the checkpoint of")
    assert str(caught.value).endswith("Run the same code again to continue from there.")
    history = fit(tmp_path / "run", [CtrlCInValidation(epoch=-1)])
    assert history.epoch == [0, 1, 2]
    assert len(history.history["val_loss"]) == 3

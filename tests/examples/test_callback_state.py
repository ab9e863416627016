"""Built-in callbacks continue where they were, also where their files were lost.

In one process: ``agent.stop()`` mid-epoch commits a checkpoint and ends
``fit`` cleanly, which is what a death after that checkpoint leaves (the
SIGKILL versions are in ``test_examples.py``); then a second ``fit`` with
fresh callback objects — what rerunning the notebook builds — resumes.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from support.compare import assert_same_files

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402
from support.toy import tiny_model as build_model  # noqa: E402

import colab_resume as cr  # noqa: E402

X = np.random.RandomState(0).randn(64, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)


class StopAt(keras.callbacks.Callback):
    def __init__(self, agent, batch) -> None:
        super().__init__()
        self.agent, self.batch = agent, batch

    def get_resume_state(self) -> dict:
        return {}

    def set_resume_state(self, state: dict) -> None:
        pass

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            self.agent.stop()


def make_dataset(epoch: int, skip: int = 0) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(64, seed=epoch)
    return ds.batch(8).skip(skip)


def fit(run_dir, logs_dir, stop_at=None, append=False):
    agent = cr.Agent(str(run_dir), save_every_steps=100, heartbeat_seconds=0.5)
    csv_logger = keras.callbacks.CSVLogger(str(logs_dir / "log.csv"), append=append)
    board = keras.callbacks.TensorBoard(str(logs_dir / "tb"), update_freq="batch")
    callbacks = [csv_logger, board]
    if stop_at is not None:
        callbacks.append(StopAt(agent, stop_at))
    agent.fit(
        build_model,
        make_dataset,
        epochs=4,
        steps_per_epoch=8,
        callbacks=callbacks,
        verbose=0,
    )
    return csv_logger, board


def read(path) -> dict:
    with open(path) as handle:
        return {"log.csv": handle.read()}


@pytest.mark.parametrize("append", [False, True])
def test_csv_log_and_tensorboard_steps_continue_on_a_new_vm(tmp_path, append):
    keras.utils.set_random_seed(5)
    _, board = fit(tmp_path / "reference", tmp_path / "reference-logs", append=append)
    expected_batches = board._global_train_batch

    keras.utils.set_random_seed(5)
    logs = tmp_path / "logs"
    fit(tmp_path / "run", logs, stop_at=2, append=append)  # epoch 1, batch 2
    os.remove(logs / "log.csv")  # a new VM: the local disk is gone
    _, board = fit(tmp_path / "run", logs, append=append)

    assert_same_files(
        read(logs / "log.csv"), read(tmp_path / "reference-logs" / "log.csv"), "csv"
    )
    assert board._global_train_batch == expected_batches == 32

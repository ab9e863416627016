"""A portable save's snapshot keeps the step's values while training goes on.

The upload thread serialises the arrays after the training thread has moved
on (``write_behind``). On the CPU the snapshot is a reference to the
variables' buffers, which TensorFlow copies before updating in place while
the snapshot holds them; these tests update the variables between the
snapshot and the write, the way training does, and read the files back.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf

from colab_resume.checkpoint.formats.portable import ArrayState, read_shards


def test_in_place_updates_after_the_snapshot_do_not_reach_the_file(tmp_path):
    state = {
        "w": tf.Variable(np.arange(12, dtype="float32").reshape(3, 4)),
        "step": tf.Variable(5, dtype=tf.int64),
    }
    saver = ArrayState(state, write_behind=True)
    prefix = os.path.join(tmp_path, "ckpt")
    saver.write(prefix)
    state["w"].assign_add(tf.ones((3, 4)))  # in place, as optimizers update
    state["w"].assign(tf.zeros((3, 4)))
    state["step"].assign_add(1)
    saver.sync()
    arrays = read_shards(prefix)
    assert np.array_equal(
        arrays["w/000000"], np.arange(12, dtype="float32").reshape(3, 4)
    )
    assert int(arrays["step/000000"]) == 5


def test_optimizer_steps_after_the_snapshot_do_not_reach_the_file(tmp_path):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss="mse")
    x, y = np.ones((8, 4), "float32"), np.zeros((8, 3), "float32")
    model.train_on_batch(x, y)
    saver = ArrayState(model, write_behind=True)
    # The first save reads eagerly and the upload thread traces the one-call
    # read the later saves use once a checkpoint is committed: both kinds
    # are checked.
    for save in range(3):
        before = [v.numpy().copy() for v in model.variables + model.optimizer.variables]
        prefix = os.path.join(tmp_path, f"ckpt-{save}")
        saver.write(prefix)
        for _ in range(3):
            model.train_on_batch(x, y)
        saver.sync()
        saver.committed()
        arrays = read_shards(prefix)
        saved = [arrays[f"model/{i:06d}"] for i in range(len(model.variables))]
        saved += [
            arrays[f"optimizer/{i:06d}"] for i in range(len(model.optimizer.variables))
        ]
        assert [a.tobytes() for a in saved] == [b.tobytes() for b in before]
        assert not np.array_equal(model.variables[0].numpy(), before[0])
    assert saver._reader, "the later saves did not use the traced read"

"""Fit's input iterators are deleted on the reaper thread, not in training
(colab_resume/backend/tf_iterators.py).

Real TensorFlow on the CPU, in this process. Deleting a ``tf.data``
iterator can block for seconds on TensorFlow 2.21; whether it does here
is up to TensorFlow's timing, so these tests check where the deletes
happen, which is what keeps the training thread out of that wait.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the TensorFlow backend's input path")
import keras  # noqa: E402

import colab_resume as cr  # noqa: E402
from colab_resume.backend import tf_iterators  # noqa: E402

X = np.random.RandomState(1).randn(64, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)
REAPER = "colab-resume-iterator-reaper"


def dataset() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(16, drop_remainder=True)


def model() -> keras.Model:
    keras.utils.set_random_seed(5)
    built = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    built.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return built


# Each delete can block for up to ~70 s on TensorFlow 2.21 (the reason the
# reaper exists), and longer on a loaded machine: the wait below is a bound
# for a reaper that never runs, not a window.
@pytest.mark.timeout(900)
def test_the_iterators_outlive_fit_and_die_on_the_reaper_thread():
    trained = model()
    # Which thread deletes them is the point here, not how long a delete
    # takes: without tf.data's autotuning a delete does not wait out its
    # optimisation period (one took 11 minutes on a loaded machine).
    options = tf.data.Options()
    options.autotune.enabled = False
    quick = dataset().with_options(options)
    fed, release = tf_iterators.fit_input(quick, trained.distribute_strategy)
    trained.fit(fed, epochs=3, steps_per_epoch=4, verbose=0)

    # fit has returned: without the agent's references its iterators would
    # have been deleted by now, on this thread.
    assert release.iterators, "fit's iterators were not kept"
    died: list[str] = []
    all_died = threading.Event()
    count = len(release.iterators)

    def record() -> None:
        died.append(threading.current_thread().name)
        if len(died) == count:
            all_died.set()

    for iterator in release.iterators:
        weakref.finalize(iterator, record)
    del iterator  # the loop's own reference
    assert died == []
    release()
    assert release.iterators == []
    assert all_died.wait(800), f"{len(died)} of {count} iterators deleted"
    assert set(died) == {REAPER}


def test_the_kept_input_trains_exactly_as_the_dataset():
    plain = model()
    plain.fit(dataset(), epochs=3, steps_per_epoch=4, verbose=0, shuffle=False)
    kept = model()
    fed, release = tf_iterators.fit_input(dataset(), kept.distribute_strategy)
    kept.fit(fed, epochs=3, steps_per_epoch=4, verbose=0, shuffle=False)
    release()
    for a, b in zip(plain.weights, kept.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_the_agent_hands_its_fit_iterators_to_the_reaper(tmp_path, monkeypatch):
    handed: list[int] = []
    original = tf_iterators.Release.__call__

    def counted(self):
        handed.append(len(self.iterators))
        original(self)

    monkeypatch.setattr(tf_iterators.Release, "__call__", counted)
    agent = cr.Agent(str(tmp_path / "run"), save_every_steps=4, prefer="cpu")
    agent.fit(model, lambda epoch: dataset(), epochs=3, steps_per_epoch=4, verbose=0)
    agent.close()
    # One release per fit call (spans of 1 and 2 epochs), each with iterators.
    assert len(handed) == 2 and all(handed), handed


def test_the_process_exits_only_after_the_deletes_handed_over(tmp_path):
    # A delete still under way when the interpreter finalizes aborts the
    # process (its thread is ended inside TensorFlow's destructor): exit
    # waits for it. An object whose delete takes a second stands in for an
    # iterator whose delete waits; the process exits right after handing it.
    done = tmp_path / "deleted"
    script = f"""
import time
from colab_resume.backend import tf_iterators

class SlowToDelete:
    def __del__(self):
        time.sleep(1.0)
        open({str(done)!r}, "w").close()

release = tf_iterators.Release()
release.iterators.append(SlowToDelete())
release()
"""
    finished = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    assert done.exists(), "the process exited before the delete it handed over"

"""The Agent's public surface, and the lighter path's seam in the loop.

``Agent`` shows what users need (README's "Training with the agent") and
keeps its parts private; the lighter path is the loop's ``open_light``, a
narrow API the Agent is thin over. Real TensorFlow on the CPU and real
local run directories.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow")
import keras  # noqa: E402

import colab_resume as cr  # noqa: E402
from colab_resume.agent.callback import ModelState  # noqa: E402

X = np.random.RandomState(0).randn(64, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)

# What README.md and notebooks/ use, and the Attributes of Agent's docstring.
PUBLIC = {
    # methods
    "callback",
    "close",
    "connect",
    "fit",
    "flush_history",
    "goodput",
    "on_progress",
    "on_step",
    "panel",
    "pause",
    "progress",
    "restore",
    "resume",
    "run",
    "save_now",
    "status",
    "stop",
    # attributes and read-only properties
    "connection",
    "events",
    "model",
    "options",
    "outcome",  # how the last fit/run ended (cr.exit_code reads it)
    "recoveries",
    "run_dir",
    "state",
    "stopped",
}


def build_model() -> keras.Model:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def dataset() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)


def test_an_agent_shows_what_users_need_and_keeps_its_parts_private(tmp_path):
    agent = cr.Agent(str(tmp_path / "run"), prefer="cpu")
    shown = {name for name in dir(agent) if not name.startswith("_")}
    assert shown == PUBLIC, (sorted(shown - PUBLIC), sorted(PUBLIC - shown))


def test_the_lighter_path_is_the_loops_open_light(tmp_path):
    """The seam itself: the loop takes the run, restores the user's model and
    gives one callback per fit, without the Agent (reached here, privately,
    only for the loop it built)."""
    run = str(tmp_path / "run")
    loop = cr.Agent(run, prefer="cpu", save_every_steps=4)._loop
    light = loop.open_light(ModelState(build_model(), epochs=2))
    assert (light.start.step, light.start.initial_epoch, light.start.skip) == (0, 0, 0)
    light.driver.model.fit(
        dataset(), epochs=1, steps_per_epoch=8, callbacks=[light.callback()], verbose=0
    )
    assert not light.ended  # epoch 1 of 2: the session beats on for the next fit
    assert cr.inspect(run).state == "ALIVE"
    light.driver.model.fit(
        dataset(),
        initial_epoch=1,
        epochs=2,
        steps_per_epoch=8,
        callbacks=[light.callback()],
        verbose=0,
    )
    assert light.ended and cr.inspect(run).state == "COMPLETED"
    with pytest.raises(RuntimeError, match=r"restore\(model\) again"):
        light.callback()

    again = cr.Agent(run, prefer="cpu")._loop
    fresh = again.open_light(ModelState(build_model()))
    assert (fresh.start.step, fresh.start.initial_epoch) == (16, 2)
    again.close()
    assert fresh.ended

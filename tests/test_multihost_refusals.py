"""What a multi-process run refuses, before anything runs.

Only ``agent.fit`` feeds each process its rows of every global batch, so
``agent.run`` and the lighter path (``agent.restore``), whose steps are the
user's code, refuse with the alternative, as ``pause()`` does. The
multi-process side is a stand-in here (an object in the agent's
``multihost`` slot): the refusal is decided before any collective, so no
JAX processes are needed to check it; tests/on_jax/test_multihost.py runs
the real ones.
"""

from __future__ import annotations

import pytest

import colab_resume as cr


@pytest.fixture
def agent_of_a_slice(tmp_path):
    agent = cr.Agent(str(tmp_path / "run"), prefer="cpu")
    agent._loop.multihost = object()  # stand-in: one process of a slice
    yield agent
    agent._loop.multihost = None
    agent.close()


def test_run_and_restore_refuse_naming_fit(agent_of_a_slice):
    with pytest.raises(RuntimeError, match="only agent.fit") as raised:
        agent_of_a_slice.run(lambda: {}, lambda e: [], lambda s, b: {}, total_steps=1,
                             steps_per_epoch=1)  # fmt: skip
    assert "agent.run is not supported in a multi-process run" in str(raised.value)
    with pytest.raises(RuntimeError, match="agent.restore is not supported"):
        agent_of_a_slice.restore(object(), epochs=1)


def test_pause_refuses_naming_stop(agent_of_a_slice):
    with pytest.raises(RuntimeError, match="Use stop"):
        agent_of_a_slice.pause()

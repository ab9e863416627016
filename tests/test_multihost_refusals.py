"""What a multi-process run refuses, before anything runs.

``agent.fit`` and ``agent.run`` feed each process its rows of every global
batch; the lighter path (``agent.restore``), whose ``fit`` is the user's
own, refuses naming them, as ``pause()`` refuses naming ``stop()``. The
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


def test_restore_refuses_naming_fit_and_run(agent_of_a_slice):
    with pytest.raises(RuntimeError, match="agent.restore") as raised:
        agent_of_a_slice.restore(object(), epochs=1)
    assert "Use agent.fit or agent.run" in str(raised.value)


def test_pause_refuses_naming_stop(agent_of_a_slice):
    with pytest.raises(RuntimeError, match="Use stop"):
        agent_of_a_slice.pause()

"""A ``tf.distribute`` strategy of the user's is theirs: kept, named, resumed bitwise.

Real processes (``tests/workers/agent_worker.py``): the user makes a
2-replica ``MirroredStrategy`` over logical CPUs, as the agent would, and
either passes it (``strategy=``) or enters its ``scope()`` around the
agent's calls. The agent trains under it (the event says so, and which),
and a run SIGKILLed mid-epoch under the user's strategy and rerun ends
bitwise equal to an uninterrupted run under the agent's own strategy. On
JAX the option is refused by name (``tests/on_jax/test_user_distribution.py``
keeps the user's ``keras.distribution`` there).
"""

from __future__ import annotations

import json
import random

import pytest
from support import assert_bitwise_equal, steps_here, train_agent

from colab_resume import Agent
from colab_resume.runtime.errors import ConnectOptionError

TOTAL_STEPS = 36  # the worker's 3 epochs x 12 steps


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """Uninterrupted, under the agent's own 2-replica MirroredStrategy."""
    base = tmp_path_factory.mktemp("reference")
    out = str(base / "weights.npz")
    assert steps_here(train_agent(str(base / "run"), out)) == TOTAL_STEPS
    return out


def strategy_events(path: str) -> list[dict]:  # type: ignore[type-arg]
    with open(path) as handle:
        return [e for e in json.load(handle) if e["kind"] == "runtime.strategy"]


@pytest.mark.parametrize("how", ["passed", "entered"])
def test_the_users_strategy_is_kept_and_a_kill_resumes_bitwise(
    reference, tmp_path, how
) -> None:
    run, out = str(tmp_path / "run"), str(tmp_path / "w.npz")
    # From step 10 on a checkpoint has committed: the save at step 10 (done
    # before the step's hook kills) first waits for step 5's upload to end.
    kill_at = random.Random().randint(10, TOTAL_STEPS - 4)
    args = ("--user-strategy", how, "--events", str(tmp_path / "e.json"))
    died = train_agent(run, out, *args, "--kill-at-step", str(kill_at), expect_rc=-9)
    assert f"KILLING at step {kill_at}" in died.stdout  # it died training
    rerun = train_agent(run, out, *args)
    assert 0 < steps_here(rerun) < TOTAL_STEPS  # resumed, not restarted
    (said,) = strategy_events(str(tmp_path / "e.json"))
    assert said["message"].startswith(
        f"training under the MirroredStrategy the user {how} (2 replicas on CPU), kept"
    ), said
    assert_bitwise_equal(reference, out)


def test_a_strategy_that_is_not_one_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(ConnectOptionError, match="got dict"):
        Agent(str(tmp_path / "run"), strategy={"replicas": 2})

"""Each default lives once (colab_resume/defaults.py); every option class agrees."""

from __future__ import annotations

from colab_resume import defaults
from colab_resume.agent.options import AgentOptions
from colab_resume.checkpoint.manager import CheckpointConfig
from colab_resume.checkpoint.triggers import TriggerOptions
from colab_resume.heartbeat import SessionOptions, liveness
from colab_resume.retry import RetryPolicy


def test_every_option_class_takes_its_default_from_one_home():
    agent, session = AgentOptions(), SessionOptions()
    assert agent.keep == CheckpointConfig().keep == defaults.KEEP
    assert (
        agent.save_every_seconds
        == TriggerOptions().every_seconds
        == defaults.SAVE_EVERY_SECONDS
    )
    assert (
        agent.stall_after_seconds
        == session.stall_after_seconds
        == liveness.DEFAULT_STALL_AFTER_S
        == defaults.STALL_AFTER_SECONDS
    )
    assert (
        agent.storage_retry_seconds
        == RetryPolicy().total_seconds
        == defaults.STORAGE_RETRY_SECONDS
    )
    assert agent.heartbeat_seconds == session.heartbeat_seconds
    assert session.dead_after == defaults.BEATS_BEFORE_DEAD * defaults.HEARTBEAT_SECONDS

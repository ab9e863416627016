"""The Agent's flat options compose the parts' option objects (issue 22.4).

Each flat keyword argument lands in the option class of the part that uses
it, whose check is the only one; the messages a user reads stay word for
word what they were when ``AgentOptions`` repeated those checks itself.
"""

from __future__ import annotations

import dataclasses

import pytest

import colab_resume as cr
from colab_resume import defaults
from colab_resume.agent.options import AgentOptions
from colab_resume.checkpoint.manager import CheckpointConfig
from colab_resume.checkpoint.triggers import DEFAULT_LIFETIME_SECONDS, TriggerOptions
from colab_resume.heartbeat import SessionOptions
from colab_resume.retry import RetryPolicy
from colab_resume.runtime.errors import ConnectOptionError
from colab_resume.runtime.options import ConnectOptions

_NAMES = (
    "save_every_steps, save_every_seconds, save_every, save_every_floor_seconds, "
    "save_every_ceiling_seconds, save_every_prior_seconds, keep, keep_every_steps, "
    "frozen, heartbeat_seconds, dead_after_seconds, stall_after_seconds, takeover, "
    "storage_options, prefer, cpu_replicas, precision, strategy, max_recoveries, "
    "recovery_backoff_seconds, lifetime_seconds, storage_retry_seconds, run_id, "
    "reset_data_fingerprints, on_runtime_change, exit_on_preemption, "
    "preemption_notices, on_done, "
    "distributed, coordinator_address, num_processes, "
    "process_id, peer_dead_after_seconds, data_sharding, start_timeout_seconds"
)
_RUN_ID = "1-128 letters, digits, '.', '_' or '-' (or None)"

# Every message below is the one the Agent gave before the composition
# (recorded from that code), character for character.
MESSAGES = [
    (
        {"save_every_steps": None, "save_every_seconds": None},
        ValueError,
        "save_every_steps and save_every_seconds are both None, so no checkpoint "
        "would ever be written. Set at least one, e.g. save_every_seconds=600.",
    ),
    (
        {"save_every_steps": 0},
        ValueError,
        "save_every_steps must be an int >= 1 or None, got 0.",
    ),
    (
        {"save_every_steps": 2.5},
        ValueError,
        "save_every_steps must be an int >= 1 or None, got 2.5.",
    ),
    (
        {"save_every_seconds": 0},
        ValueError,
        "save_every_seconds must be a number of seconds > 0 or None, got 0.",
    ),
    (
        {"save_every_seconds": float("inf")},
        ValueError,
        "save_every_seconds must be a number of seconds > 0 or None, got inf.",
    ),
    ({"keep": 0}, ValueError, "keep must be an int >= 1, got 0."),
    ({"keep": True}, ValueError, "keep must be an int >= 1, got True."),
    (
        {"keep_every_steps": 0},
        ValueError,
        "keep_every_steps must be an int >= 1 or None, got 0.",
    ),
    (
        {"heartbeat_seconds": -1},
        ValueError,
        "heartbeat_seconds must be a number of seconds > 0, got -1.",
    ),
    (
        {"heartbeat_seconds": "10"},
        ValueError,
        "heartbeat_seconds must be a number of seconds > 0, got '10'.",
    ),
    (
        {"dead_after_seconds": 0},
        ValueError,
        "dead_after_seconds must be a number of seconds > 0 or None, got 0.",
    ),
    (
        {"heartbeat_seconds": 10, "dead_after_seconds": 5},
        ValueError,
        "dead_after_seconds (5) must be longer than heartbeat_seconds (10), or a "
        "live session would look dead between two beats; e.g. "
        "dead_after_seconds=40 (4 beats), or None for that default.",
    ),
    (
        {"stall_after_seconds": 0},
        ValueError,
        "stall_after_seconds must be a number of seconds > 0, got 0.",
    ),
    ({"takeover": 1}, ValueError, "takeover must be True or False, got 1."),
    (
        {"storage_options": "anon"},
        ValueError,
        "storage_options must be a dict of fsspec options (e.g. {'token': 'anon'}) "
        "or None, got 'anon'.",
    ),
    (
        {"prefer": "quantum"},
        ConnectOptionError,
        "prefer must be one of 'auto', 'tpu', 'gpu', 'cpu', got 'quantum'. Use "
        "prefer='auto' to take the best accelerator found.",
    ),
    (
        {"cpu_replicas": 0},
        ConnectOptionError,
        "cpu_replicas must be an int >= 1, got 0. Use 1 for one CPU device, or "
        "e.g. 2 to rehearse a 2-replica strategy.",
    ),
    (
        {"precision": "fp8"},
        ConnectOptionError,
        "precision must be one of 'auto', 'float32', 'mixed_bfloat16', "
        "'mixed_float16', got 'fp8'. Use precision='auto' for mixed_bfloat16 on "
        "TPU and float32 elsewhere.",
    ),
    (
        {"max_recoveries": True},
        ValueError,
        "max_recoveries must be an int >= 0, got True.",
    ),
    (
        {"max_recoveries": -1},
        ValueError,
        "max_recoveries must be an int >= 0, got -1.",
    ),
    (
        {"recovery_backoff_seconds": 0},
        ValueError,
        "recovery_backoff_seconds must be a number of seconds > 0, got 0.",
    ),
    (
        {"recovery_backoff_seconds": "x"},
        ValueError,
        "recovery_backoff_seconds must be a number of seconds > 0, got 'x'.",
    ),
    (
        {"lifetime_seconds": -5},
        ValueError,
        "lifetime_seconds must be a number of seconds > 0 or None, got -5.",
    ),
    (
        {"storage_retry_seconds": 0},
        ValueError,
        "storage_retry_seconds must be a number of seconds > 0, got 0.",
    ),
    (
        {"run_id": "a b"},
        ValueError,
        f"run_id must be {_RUN_ID}, got 'a b'; e.g. run_id='mnist-resnet-v3'.",
    ),
    (
        {"run_id": 7},
        ValueError,
        f"run_id must be {_RUN_ID}, got 7; e.g. run_id='mnist-resnet-v3'.",
    ),
    (
        {"reset_data_fingerprints": "yes"},
        ValueError,
        "reset_data_fingerprints must be True or False, got 'yes'. Set it True "
        "for one run after fixing a non-deterministic make_dataset.",
    ),
    (
        {"exit_on_preemption": "auto"},
        ValueError,
        "exit_on_preemption must be True or False, got 'auto'. Or None: decided "
        "for this runtime.",
    ),
    (
        {"on_done": 7},
        ValueError,
        "on_done must be a command line (str) or a callable, got 7",
    ),
    (
        {"data_sharding": "per_host"},
        ValueError,
        "data_sharding must be 'global' (make_dataset yields the global batches; "
        "each process is fed its rows) or 'per_process' (it yields this "
        "process's rows only), got 'per_host'.",
    ),
    (
        {"save_every_step": 10},
        TypeError,
        "Agent got an unknown option 'save_every_step'. Did you mean "
        f"'save_every_steps'? The options are: {_NAMES}.",
    ),
    (
        {"heartbeat": 3},
        TypeError,
        "Agent got an unknown option 'heartbeat'. Did you mean "
        f"'heartbeat_seconds'? The options are: {_NAMES}.",
    ),
]


@pytest.mark.parametrize(("options", "error", "message"), MESSAGES)
def test_every_flat_option_error_reads_as_before(tmp_path, options, error, message):
    with pytest.raises(error) as raised:
        cr.Agent(str(tmp_path / "run"), **options)
    assert str(raised.value) == message


def test_flat_options_compose_the_parts_option_objects():
    options = AgentOptions(
        save_every_steps=5,
        save_every_seconds=None,
        lifetime_seconds=100,
        keep=4,
        keep_every_steps=50,
        heartbeat_seconds=2,
        dead_after_seconds=9,
        stall_after_seconds=30,
        takeover=True,
        run_id="r-1",
        prefer="cpu",
        cpu_replicas=2,
        precision="float32",
        storage_retry_seconds=7,
        recovery_backoff_seconds=1.5,
        max_recoveries=4,
    )
    assert options.triggers == TriggerOptions(
        every_steps=5, every_seconds=None, lifetime_seconds=100
    )
    assert options.checkpoints == CheckpointConfig(keep=4, keep_every_steps=50)
    assert options.session == SessionOptions(
        heartbeat_seconds=2,
        dead_after_seconds=9,
        stall_after_seconds=30,
        takeover=True,
        expected_run_id="r-1",
    )
    assert options.connect == ConnectOptions(
        prefer="cpu", cpu_replicas=2, precision="float32"
    )
    assert options.storage_retry == RetryPolicy(total_seconds=7)
    # Doubling from the first wait up to the one before the last recovery.
    assert options.recovery == RetryPolicy(initial_seconds=1.5, max_seconds=12.0)
    # Read back flat, as before.
    assert (options.keep, options.run_id, options.max_recoveries) == (4, "r-1", 4)
    assert options.recovery_backoff_seconds == 1.5


def test_the_defaults_are_the_parts_defaults():
    options = AgentOptions()
    assert options.triggers == TriggerOptions()
    assert options.checkpoints == CheckpointConfig()
    assert options.session == SessionOptions()
    assert options.connect == ConnectOptions()
    assert options.storage_retry == RetryPolicy()
    flat = {name: getattr(options, name) for name in _NAMES.split(", ")}
    assert flat == {
        "save_every_steps": None,
        "save_every_seconds": defaults.SAVE_EVERY_SECONDS,
        "save_every": None,
        "save_every_floor_seconds": defaults.AUTO_SAVE_FLOOR_SECONDS,
        "save_every_ceiling_seconds": defaults.AUTO_SAVE_CEILING_SECONDS,
        "save_every_prior_seconds": defaults.PRIOR_BETWEEN_FAILURES_SECONDS,
        "keep": defaults.KEEP,
        "keep_every_steps": None,
        "heartbeat_seconds": defaults.HEARTBEAT_SECONDS,
        "dead_after_seconds": None,
        "stall_after_seconds": defaults.STALL_AFTER_SECONDS,
        "takeover": False,
        "storage_options": None,
        "prefer": "auto",
        "cpu_replicas": 1,
        "precision": "auto",
        "strategy": None,
        "max_recoveries": 3,
        "recovery_backoff_seconds": 2.0,
        "lifetime_seconds": DEFAULT_LIFETIME_SECONDS,
        "storage_retry_seconds": defaults.STORAGE_RETRY_SECONDS,
        "run_id": None,
        "reset_data_fingerprints": False,
        "on_runtime_change": "continue",
        "exit_on_preemption": None,
        "preemption_notices": None,
        "on_done": None,
        "distributed": None,
        "coordinator_address": None,
        "num_processes": None,
        "process_id": None,
        "peer_dead_after_seconds": 30.0,
        "data_sharding": "global",
        "start_timeout_seconds": 300.0,
        "frozen": "once",
    }
    assert options.recovery == RetryPolicy(initial_seconds=2.0, max_seconds=8.0)


def test_options_stay_frozen():
    options = AgentOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.session = SessionOptions()  # type: ignore[misc]


def test_a_session_bound_is_checked_when_the_agent_is_made(tmp_path):
    # The session's own limits (what readers accept) were only met once a
    # fit() took the run; they belong to SessionOptions, checked up front.
    with pytest.raises(ValueError, match="stall_after_seconds must be at most"):
        cr.Agent(str(tmp_path / "run"), stall_after_seconds=10 * 86_400)
    with pytest.raises(ValueError, match="at most 86400"):
        cr.Agent(str(tmp_path / "run"), heartbeat_seconds=30_000)


def test_a_part_built_alone_still_names_its_own_field():
    with pytest.raises(ValueError, match=r"^TriggerOptions\.every_steps must be"):
        TriggerOptions(every_steps=0)
    with pytest.raises(ValueError, match=r"^RetryPolicy\.total_seconds must be"):
        RetryPolicy(total_seconds=0)
    with pytest.raises(ValueError, match=r"^CheckpointConfig\.keep must be"):
        CheckpointConfig(keep=0)

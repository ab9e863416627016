"""How a training script ends, as its launcher reads it: the exit status.

Real processes (``tests/workers/agent_worker.py``, TensorFlow on CPU) and
real signals: completed 0, an exception 1, ``stop()`` 5 (``fit`` returns, the
script exits with ``cr.exit_code``), SIGTERM mid-run
143 after the final commit, and a preemption notice from the metadata
server 143. No metadata server runs off Compute Engine: the notice comes
from ``support.metadata_server``, a local stand-in answering the paths the
watcher polls (see its docstring).
"""

from __future__ import annotations

import signal

from support import run_worker, wait_for, worker
from support.metadata_server import MetadataServer

from colab_resume import exit_status
from colab_resume.heartbeat import read_status
from colab_resume.protocol.listing import RunListing
from colab_resume.storage import Storage

STEPS = 3 * 12  # the worker's default plan: 3 epochs of 12 steps
SLOW = ("--step-sleep", "0.15", "--events")  # a signal lands mid-run


def ended_early(run_dir: str, result) -> int:
    """The step a run stopped at, checked against what its directory holds."""
    line = result.last("EVENT run.stopped")
    step = int(line.split("step=")[1].split()[0])
    assert 0 < step < STEPS, f"the stop did not land during training: {line}"
    storage = Storage(run_dir)
    assert RunListing.read(storage).committed_step == step  # the final commit
    status = read_status(storage)
    assert status.state == "STOPPED" and status.checkpoint_step == step
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return step


def test_a_completed_run_exits_0(tmp_path):
    result = run_worker(
        "agent_worker", str(tmp_path / "run"), str(tmp_path / "out.npz"),
        "--epochs", "1", "--steps-per-epoch", "4",
        expect_rc=exit_status.COMPLETED,
    )  # fmt: skip
    assert "DONE" in result.stdout


def test_a_bug_exits_1_with_its_traceback(tmp_path):
    result = run_worker(
        "agent_worker", str(tmp_path / "run"), str(tmp_path / "out.npz"),
        "--epochs", "1", "--steps-per-epoch", "6", "--raise-at-step", "3",
        expect_rc=exit_status.FAILED,
    )  # fmt: skip
    assert "RuntimeError: a bug at step 3" in result.stderr
    assert read_status(Storage(str(tmp_path / "run"))).state == "FAILED"


def test_stop_returns_then_the_script_exits_5(tmp_path):
    """``stop()`` returns from ``fit`` (the code after it runs, here the
    worker's variable dump), and ``cr.exit_code(agent)`` is STOPPED."""
    run_dir = str(tmp_path / "run")
    result = run_worker(
        "agent_worker", run_dir, str(tmp_path / "out.npz"),
        "--stop-at-step", "7", "--events", str(tmp_path / "events.json"),
        expect_rc=exit_status.STOPPED,
    )  # fmt: skip
    # Step hooks run after the step's duties: a stop() there acts at the next.
    assert ended_early(run_dir, result) == 8
    assert "STOPPED" in result.last("EVENT run.stopped")
    assert "HISTORY" in result.stdout  # fit returned; the script went on


def test_sigterm_mid_training_commits_then_exits_143(tmp_path):
    run_dir = str(tmp_path / "run")
    proc = worker(
        "agent_worker", run_dir, str(tmp_path / "out.npz"),
        *SLOW, str(tmp_path / "events.json"),
    )  # fmt: skip
    with proc:
        wait_for(
            lambda: "EVENT checkpoint.committed step=5" in proc.stdout,
            240,
            "the first committed checkpoint",
            unless=proc.exited_early,
        )
        proc.popen.send_signal(signal.SIGTERM)
        result = proc.finish(expect_rc=exit_status.PREEMPTED, timeout=120)
    step = ended_early(run_dir, result)
    assert step >= 5
    assert "PREEMPTED" in result.last("EVENT run.stopped")


def test_a_metadata_preemption_notice_commits_then_exits_143(tmp_path):
    """The notice, not a signal: the watcher long-polls the stand-in server
    (``GCE_METADATA_HOST``), which turns ``instance/preempted`` TRUE once
    training has committed a checkpoint."""
    run_dir = str(tmp_path / "run")
    with MetadataServer() as server:
        proc = worker(
            "agent_worker", run_dir, str(tmp_path / "out.npz"),
            *SLOW, str(tmp_path / "events.json"),
            env={"GCE_METADATA_HOST": server.host},
        )  # fmt: skip
        with proc:
            wait_for(
                lambda: "EVENT checkpoint.committed step=5" in proc.stdout,
                240,
                "the first committed checkpoint",
                unless=proc.exited_early,
            )
            # The watcher is polling already (a long poll is waiting).
            assert server.requests.get("instance/preempted", 0) >= 1
            server.set("instance/preempted", "TRUE")
            result = proc.finish(expect_rc=exit_status.PREEMPTED, timeout=120)
    assert "EVENT preemption.notice instance/preempted" in result.stdout
    ended_early(run_dir, result)
    assert "metadata: instance/preempted TRUE" in result.stderr

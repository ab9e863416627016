"""What a launcher hands the process, without training: run identity from
each environment variable, when the notice watcher runs and what it reads,
and the on_done teardown (its dry run and its refusals).

The notice watcher polls ``support.metadata_server``, a local stand-in for
the Compute Engine metadata server (none runs off Compute Engine).
"""

from __future__ import annotations

import logging
import sys
import threading

import pytest
from support import wait_for
from support.metadata_server import MetadataServer

import colab_resume as cr
from colab_resume import exit_status
from colab_resume.launch import identity, notices, teardown
from colab_resume.launch.identity import run_dir_from_environment

# --- run identity -------------------------------------------------------------------


def test_colab_resume_run_dir_comes_first():
    found = run_dir_from_environment(
        {
            "COLAB_RESUME_RUN_DIR": "gs://b/runs/mine",
            "AIP_CHECKPOINT_DIR": "gs://b/vertex/checkpoints/",
            "SKYPILOT_TASK_ID": "sky-1",
            "COLAB_RESUME_BASE_DIR": "gs://b/runs",
        }
    )
    assert (found.run_dir, found.source) == ("gs://b/runs/mine", "COLAB_RESUME_RUN_DIR")


def test_vertex_checkpoint_dir_is_the_run():
    found = run_dir_from_environment(
        {"AIP_CHECKPOINT_DIR": "gs://b/out/checkpoints/", "SKYPILOT_TASK_ID": "x"}
    )
    assert (found.run_dir, found.source) == (
        "gs://b/out/checkpoints",
        "AIP_CHECKPOINT_DIR",
    )


def test_a_skypilot_task_is_a_run_under_the_base_dir():
    task = "sky-managed-2024-05-01-10-00-00-123456_train_3-0"
    found = run_dir_from_environment(
        {"SKYPILOT_TASK_ID": task, "COLAB_RESUME_BASE_DIR": "gs://b/runs/", "AIP": ""}
    )
    assert found.run_dir == f"gs://b/runs/{task}"
    assert found.source == "SKYPILOT_TASK_ID under COLAB_RESUME_BASE_DIR"
    odd = run_dir_from_environment(
        {"SKYPILOT_TASK_ID": "a b/../c", "COLAB_RESUME_BASE_DIR": "/runs"}
    )
    assert odd.run_dir.startswith("/runs/a-b-..-c~")  # one segment, no traversal
    assert "/" not in odd.run_dir[len("/runs/") :]


def test_distinct_task_ids_never_share_a_run():
    ids = ["a/b", "a b", "a-b", "a~b", "タスク", "задача", "..", ".", "", "-x-", "x"]
    names = [identity.task_folder(task) for task in ids]
    assert len(set(names)) == len(ids), dict(zip(ids, names, strict=True))
    assert identity.task_folder("a-b") == "a-b"  # readable ids stay as they are
    for name in names:
        assert name not in (".", "..") and "/" not in name and name


def test_a_skypilot_task_without_a_base_dir_says_what_to_set():
    with pytest.raises(cr.NoRunDirError, match="COLAB_RESUME_BASE_DIR is not"):
        run_dir_from_environment({"SKYPILOT_TASK_ID": "sky-1"})


def test_no_run_dir_lists_what_was_looked_at():
    with pytest.raises(cr.NoRunDirError) as raised:
        run_dir_from_environment({"COLAB_RESUME_RUN_DIR": "  ", "HOME": "/root"})
    message = str(raised.value)
    for name in identity.ORDER:
        assert name in message
    assert isinstance(raised.value, ValueError)


def test_the_agent_takes_its_run_from_the_environment(tmp_path, monkeypatch, caplog):
    for name in ("COLAB_RESUME_RUN_DIR", "AIP_CHECKPOINT_DIR", "SKYPILOT_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SKYPILOT_TASK_ID", "sky-7_train_1-0")
    monkeypatch.setenv("COLAB_RESUME_BASE_DIR", str(tmp_path / "runs"))
    with caplog.at_level(logging.INFO):
        agent = cr.Agent()
    assert agent.run_dir == str(tmp_path / "runs" / "sky-7_train_1-0")
    [said] = agent.events.recent(kind="run.identity")
    assert said.message == (
        f"run directory {agent.run_dir} (from SKYPILOT_TASK_ID under "
        "COLAB_RESUME_BASE_DIR)"
    )
    assert said.message in caplog.text  # one line in the log
    monkeypatch.delenv("SKYPILOT_TASK_ID")
    with pytest.raises(cr.NoRunDirError):
        cr.Agent()


# --- preemption notices -------------------------------------------------------------


def test_compute_engine_is_told_by_env_and_dmi_never_the_network(tmp_path):
    dmi = tmp_path / "product_name"
    assert notices.on_compute_engine({}, str(dmi)) is False  # no DMI file (laptop)
    dmi.write_text("Google Compute Engine\n")
    assert notices.on_compute_engine({}, str(dmi)) is True
    assert notices.on_compute_engine({"COLAB_RELEASE_TAG": "r1"}, str(dmi)) is False
    assert (
        notices.on_compute_engine({"KAGGLE_KERNEL_RUN_TYPE": "Batch"}, str(dmi))
        is False
    )
    dmi.write_text("Standard PC (Q35 + ICH9, 2009)\n")
    assert notices.on_compute_engine({}, str(dmi)) is False
    assert notices.on_compute_engine({"GCE_METADATA_HOST": "h:1"}, str(dmi)) is True


def test_what_each_metadata_value_asks_for():
    assert notices.verdict(notices.PREEMPTED, "TRUE") == "preempt"
    assert notices.verdict(notices.PREEMPTED, "FALSE") is None
    assert notices.verdict(notices.MAINTENANCE, "NONE") is None
    assert notices.verdict(notices.MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE") == (
        "preempt"
    )
    assert notices.verdict(notices.MAINTENANCE, "MIGRATE_ON_HOST_MAINTENANCE") == (
        "save"
    )


class Steering:
    def __init__(self) -> None:
        self.preempted: list[str] = []
        self.saves = 0

    def preempt(self, reason: str) -> None:
        self.preempted.append(reason)

    def request_save(self) -> None:
        self.saves += 1


def test_the_watcher_long_polls_and_acts_once_per_notice(monkeypatch):
    steering, events = Steering(), cr.EventLog()
    with MetadataServer() as server:
        monkeypatch.setenv("GCE_METADATA_HOST", server.host)
        with notices.watching(None, steering, events) as watcher:
            assert watcher is not None and watcher.host == server.host
            # Both paths read, then held in a long poll (a second request).
            wait_for(
                lambda: (
                    all(n >= 2 for n in server.requests.values())
                    and len(server.requests) == 2
                ),
                30,
                "both long polls",
            )
            server.set(notices.MAINTENANCE, "MIGRATE_ON_HOST_MAINTENANCE")
            wait_for(lambda: steering.saves == 1, 30, "a save request")
            server.set(notices.PREEMPTED, "TRUE")
            wait_for(lambda: steering.preempted, 30, "the preemption")
        assert steering.preempted == ["metadata: instance/preempted TRUE"]
        kinds = [e.data["value"] for e in events.recent(kind="preemption.notice")]
        assert kinds == ["MIGRATE_ON_HOST_MAINTENANCE", "TRUE"]


def test_no_watcher_off_compute_engine(monkeypatch):
    monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
    monkeypatch.setattr(notices, "DMI_PRODUCT_NAME", "/nonexistent/product_name")
    before = threading.active_count()
    with notices.watching(None, Steering(), cr.EventLog()) as watcher:
        assert watcher is None and threading.active_count() == before
    with notices.watching(False, Steering(), cr.EventLog()) as watcher:
        assert watcher is None


def test_an_unreachable_metadata_server_is_retried_quietly():
    """A refused connection (nothing listens) costs a retry, not the run."""
    seen: list = []
    watcher = notices.NoticeWatcher(
        lambda *a: seen.append(a), host="127.0.0.1:9", retry_seconds=0.05
    ).start()
    try:
        wait_for(
            lambda: all(t.is_alive() for t in watcher._threads),
            5,
            "the watcher still running after refusals",
        )
    finally:
        watcher.stop()
    assert seen == []


def test_broken_answers_never_end_the_watch(monkeypatch, caplog):
    """Answers that are not HTTP, or cut short, are logged and watched past:
    the real notice that follows is still acted on."""
    steering = Steering()
    with MetadataServer() as server:
        server.break_answers(*["not-http", "short"] * 3)
        with caplog.at_level(logging.DEBUG, logger="colab_resume.launch.notices"):
            watcher = notices.NoticeWatcher(
                lambda path, value, asked: steering.preempt(value),
                host=server.host,
                retry_seconds=0.05,
            ).start()
            try:
                wait_for(lambda: not server.broken, 30, "every broken answer sent")
                server.set(notices.PREEMPTED, "TRUE")
                wait_for(lambda: steering.preempted, 30, "the notice after them")
                assert all(t.is_alive() for t in watcher._threads)
            finally:
                watcher.stop()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "still watching" in warnings[0].getMessage()


# --- exit statuses in one process -----------------------------------------------------


def test_run_ended_is_a_system_exit_with_the_status():
    ended = cr.Preempted(40, "SIGTERM")
    assert isinstance(ended, SystemExit) and not isinstance(ended, Exception)
    assert ended.code == exit_status.PREEMPTED == 143
    assert not hasattr(cr, "Stopped")  # stop() returns: nothing to raise
    assert str(ended) == "PREEMPTED at step 40 (SIGTERM); exit status 143"


def test_exit_code_reads_the_agents_outcome():
    class Ran:
        outcome: str | None = None

    ran = Ran()
    assert cr.exit_code(ran) == 0
    for status, name in exit_status.NAMES.items():
        ran.outcome = name
        assert cr.exit_code(ran) == status


def test_a_script_is_not_a_kernel():
    assert exit_status.in_kernel() is False


# --- on_done ------------------------------------------------------------------------


def test_on_done_dry_run_prints_the_command_and_runs_nothing(tmp_path):
    said: list[str] = []
    # gcloud is not installed here: a dry run that ran it would fail (127).
    command = "gcloud compute tpus tpu-vm delete 'my tpu' --zone=us-central2-b --quiet"
    done = teardown.Teardown(command, dry_run=True)
    rc = teardown.run_teardown(done, "COMPLETED", {"run_dir": "r"}, say=said.append)
    assert rc == 0
    assert said == [
        "on_done (dry run): would run gcloud compute tpus tpu-vm delete 'my tpu' "
        "--zone=us-central2-b --quiet"
    ]


def test_on_done_runs_without_a_shell_with_facts_in_the_environment(tmp_path):
    out = tmp_path / "facts"
    dump = (
        "import os, sys; open(sys.argv[1], 'w').write("
        "os.environ['COLAB_RESUME_OUTCOME'] + ' ' + os.environ['COLAB_RESUME_STEP'] "
        "+ ' ' + os.environ['COLAB_RESUME_RUN_DIR'])"
    )
    run_dir = "gs://b/runs/$(touch pwned);x"  # shell syntax stays text
    command = f'{sys.executable} -c "{dump}" {out}'
    rc = teardown.run_teardown(
        teardown.Teardown(command), "COMPLETED", {"run_dir": run_dir, "step": 96}
    )
    assert rc == 0
    assert out.read_text() == f"COMPLETED 96 {run_dir}"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("outcome", ["FAILED", "PREEMPTED", "STOPPED"])
def test_on_done_refuses_a_run_that_did_not_complete(tmp_path, outcome):
    marker = tmp_path / "deleted"
    said: list[str] = []
    command = f"{sys.executable} -c 'open({str(marker)!r}, \"w\")'"
    rc = teardown.run_teardown(
        teardown.Teardown(command), outcome, {"run_dir": "r"}, say=said.append
    )
    assert rc is None and not marker.exists()
    assert said == [
        f"on_done not run: the run ended {outcome}, and on_done runs only after "
        "COMPLETED"
    ]


def test_on_done_after_a_failure_only_when_asked(tmp_path):
    calls: list[dict] = []
    asked = teardown.Teardown(calls.append, when={"COMPLETED", "FAILED"})
    assert teardown.run_teardown(asked, "FAILED", {"step": 3}) == 0
    assert calls[0]["COLAB_RESUME_OUTCOME"] == "FAILED"
    assert calls[0]["COLAB_RESUME_STEP"] == "3"


def test_on_done_dry_run_from_the_environment(monkeypatch):
    calls: list = []
    said: list[str] = []
    monkeypatch.setenv("COLAB_RESUME_ON_DONE_DRY_RUN", "1")

    def release_runtime(facts):
        calls.append(facts)

    rc = teardown.run_teardown(
        teardown.Teardown(release_runtime), "COMPLETED", {}, say=said.append
    )
    assert rc == 0 and calls == []
    assert said == [
        "on_done (dry run): would call "
        "test_on_done_dry_run_from_the_environment.<locals>.release_runtime()"
    ]


def test_bad_teardowns_are_refused_up_front():
    with pytest.raises(ValueError, match="empty"):
        teardown.Teardown("  ")
    with pytest.raises(ValueError, match="outcomes among"):
        teardown.Teardown("true", when={"DONE"})
    with pytest.raises(ValueError, match="outcomes among"):
        teardown.Teardown("true", when=set())


# --- colab-resume watch --on-done ---------------------------------------------------


def _finished_run(run_dir: str, state: str) -> None:
    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.storage import Storage

    session = RunSession.open(Storage(run_dir), SessionOptions(heartbeat_seconds=5))
    session.update(state="training", step=12)
    if state == "COMPLETED":
        session.complete({"final_step": 12, "planned_steps": 12})
    else:
        session.close(state.lower())


def test_watch_on_done_dry_run_after_a_completed_run(tmp_path, capsys):
    from colab_resume.cli import main

    run_dir = str(tmp_path / "run")
    _finished_run(run_dir, "COMPLETED")
    command = "gcloud compute instances stop my-vm --zone=us-central1-a"
    args = ["watch", run_dir, "--interval", "0.1", "--on-done", command]
    assert main([*args, "--on-done-dry-run"]) == 0
    assert f"on_done (dry run): would run {command}" in capsys.readouterr().out


@pytest.mark.parametrize("state", ["FAILED", "STOPPED"])
def test_watch_never_tears_down_a_run_that_did_not_complete(tmp_path, capsys, state):
    from colab_resume.cli import main

    run_dir = str(tmp_path / "run")
    _finished_run(run_dir, state)
    marker = tmp_path / "deleted"
    command = f"{sys.executable} -c \"open('{marker}', 'w')\""
    rc = main(["watch", run_dir, "--interval", "0.1", "--on-done", command])
    assert rc in (4, 5) and not marker.exists()
    assert f"on_done not run: the run ended {state}" in capsys.readouterr().out


def test_watch_on_done_runs_the_teardown_after_a_completed_run(tmp_path):
    from colab_resume.cli import main

    run_dir = str(tmp_path / "run")
    _finished_run(run_dir, "COMPLETED")
    marker = tmp_path / "deleted"
    command = f"{sys.executable} -c \"open('{marker}', 'w')\""
    assert main(["watch", run_dir, "--interval", "0.1", "--on-done", command]) == 0
    assert marker.exists()

"""The run's history across sessions and the report drawn from it."""

from __future__ import annotations

import json
import os
import time

import pytest
from support import wait_for

from colab_resume.cli import main
from colab_resume.events import EventLog
from colab_resume.report.history import HistoryRecorder, chunk_path, read_history
from colab_resume.report.sessions import read_report
from colab_resume.storage import Storage

PNG = b"\x89PNG\r\n\x1a\n"


def record_session(storage, lease, steps, *, clean, t0):
    """A session's history as the agent writes it (one chunk per call)."""
    events = EventLog(clock=lambda: t0)
    recorder = HistoryRecorder(events, clock=lambda: t0)
    recorder.start(storage, lease, f"session-{lease}")
    for step in steps:
        recorder.sample(step, {"loss": 10.0 / step, "acc": "not a number"})
        if step % 20 == 0:
            events.emit("checkpoint.committed", "ok", step=step, bytes=1, seconds=1.0)
    if lease == 2:
        events.emit("recovery.started", "accelerator lost", level="warning", step=45)
    if clean:
        events.emit("run.completed", "done")
    recorder.flush(wait=True)


def test_history_survives_sessions_and_report_marks_the_death(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    record_session(storage, 1, range(1, 31), clean=False, t0=1000.0)  # died at 30
    record_session(storage, 2, range(21, 61), clean=True, t0=5000.0)  # from ckpt 20
    history = read_history(storage)
    assert sorted(history.sessions) == [1, 2]
    assert [p.step for p in history.points if p.lease == 1] == list(range(1, 31))
    assert all(set(p.metrics) == {"loss"} for p in history.points)  # junk dropped
    assert {e.kind for e in history.events} >= {"recovery.started", "run.completed"}

    # With history alone (no lease or heartbeat records), the sessions still
    # come out of it: the first died at 30, the second resumed from its
    # newest commit (20) and completed.
    report = read_report(storage)
    assert [(s.lease, s.end, s.first_step, s.last_step) for s in report.sessions] == [
        (1, "died", 0, 30),
        (2, "completed", 20, 60),
    ]
    assert report.sessions[0].redone == (20, 30)
    out = tmp_path / "report.png"
    assert main(["report", storage.url, "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 10_000


@pytest.mark.parametrize(
    "damage",
    [
        b"not json",
        json.dumps({"format": 99, "points": [], "events": []}).encode(),
        json.dumps({"format": 1, "points": [[1, "x", {}]], "events": []}).encode(),
        json.dumps(
            {"format": 1, "points": [[1, 2.0, {"loss": "1"}]], "events": []}
        ).encode(),
        json.dumps({"format": 1, "points": [], "events": [{"kind": 3}]}).encode(),
        b"{" + b" " * (2 << 20) + b"}",  # over the size cap
    ],
)
def test_damaged_chunks_are_reported_and_skipped(tmp_path, damage):
    storage = Storage(str(tmp_path / "run"))
    record_session(storage, 1, range(1, 11), clean=True, t0=0.0)
    path = os.path.join(storage.root, chunk_path(1, 7))
    with open(path, "wb") as file:
        file.write(damage)
    history = read_history(storage)
    assert len(history.points) == 10  # the good chunk is still read
    assert len(history.problems) == 1 and "00000001-000007.json" in history.problems[0]


def test_report_of_an_empty_run_says_so(tmp_path):
    out = tmp_path / "r.png"
    (tmp_path / "nothing").mkdir()  # a run directory nobody trained in yet
    assert main(["report", str(tmp_path / "nothing"), "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG)


def test_recorder_writes_chunks_not_steps(tmp_path):
    now = [0.0]
    storage = Storage(str(tmp_path / "run"))
    recorder = HistoryRecorder(EventLog(), monotonic=lambda: now[0], flush_seconds=60)
    recorder.start(storage, 1, "s")
    for step in range(1, 200):
        now[0] = step * 0.5
        recorder.sample(step, {"loss": 1.0})
        recorder.maybe_flush()
    recorder.flush(wait=True)
    recorder._writer.join(5)
    names = sorted(os.listdir(os.path.join(storage.root, "history")))
    assert names == [f"00000001-{i:06d}.json" for i in range(len(names))]
    assert 2 <= len(names) <= 3  # ~100 s of samples at one chunk a minute
    assert len(read_history(storage).points) == 199


def test_a_checkpoint_commit_brings_the_next_chunk_forward(tmp_path):
    """History is as durable as the checkpoints: a commit flushes within 10 s,
    the session's first one at the next tick."""
    now = [0.0]
    storage = Storage(str(tmp_path / "run"))
    events = EventLog()
    recorder = HistoryRecorder(events, monotonic=lambda: now[0], flush_seconds=60)
    recorder.start(storage, 1, "s")

    def run_until(t: float) -> None:
        while now[0] < t:
            now[0] += 0.5
            recorder.sample(int(now[0] * 2), {"loss": 1.0})
            recorder.maybe_flush()
            if recorder._writer is not None:
                recorder._writer.join(5)

    def chunks() -> int:
        folder = os.path.join(storage.root, "history")
        return len(os.listdir(folder)) if os.path.isdir(folder) else 0

    run_until(3.0)
    events.emit("checkpoint.committed", "committed step 6", step=6)
    run_until(3.5)
    assert chunks() == 1  # the session's first commit: at the next tick
    events.emit("checkpoint.committed", "committed step 12", step=12)
    run_until(13.0)
    assert chunks() == 1  # not before 10 s since the last chunk
    run_until(14.0)
    assert chunks() == 2  # long before the 60 s timer
    run_until(40.0)
    assert chunks() == 2  # no commit since: back to one a minute


@pytest.mark.tf
def test_fit_keeps_history_and_the_panel_follows(tmp_path):
    pytest.importorskip("tensorflow")
    from support.toy import tiny_fit_parts

    import colab_resume as cr

    build_model, data = tiny_fit_parts()

    def make_dataset(epoch):
        return data

    agent = cr.Agent(str(tmp_path / "run"), save_every_steps=4, prefer="cpu")
    agent._loop.progress.interval = 0.0  # internal: sample every step of this short run
    panel = agent.panel()
    agent.fit(build_model, make_dataset, epochs=2, steps_per_epoch=8, verbose=0)
    panel.refresh()
    assert "completed" in panel.badge.value
    # The panel keeps "step 16 / 16" on one line with no-break spaces.
    assert "step 16 / 16 · epoch 2" in panel.progress.value.replace("\xa0", " ")
    assert "checkpoint: step 16" in panel.checkpoint.value.replace("\xa0", " ")
    history = read_history(Storage(agent.run_dir))
    assert [p.step for p in history.points][-1] == 16
    assert all("loss" in p.metrics for p in history.points)
    assert any(e.kind == "checkpoint.committed" for e in history.events)
    panel.draw_report()
    assert panel.report.value.startswith("<img")


def test_report_without_matplotlib_is_one_line_naming_the_install(tmp_path):
    """matplotlib hidden from the import system, as where it is not installed."""
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from colab_resume.cli import main\n"
        f"sys.exit(main(['report', {str(run_dir)!r}, '--output', 'x.png']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    assert "the run report needs matplotlib" in result.stderr
    assert "pip install matplotlib" in result.stderr
    assert "Traceback" not in result.stderr


def _beat(run_dir, lease):
    with open(os.path.join(run_dir, "heartbeat", f"{lease:08d}.json")) as file:
        return json.load(file)


@pytest.mark.tf
def test_a_session_killed_after_its_first_commit_is_drawn(tmp_path):
    """A real worker SIGKILLed a few steps after its first commit, before it
    wrote any history (its ticks are an hour apart), then resumed here: the
    report still has both sessions, the death where its last beat was and
    the steps the successor redid, from the lease, heartbeat and checkpoint
    records."""
    from support import toy, wait_for, worker

    import colab_resume as cr

    run_dir = str(tmp_path / "run")
    os.mkdir(run_dir)  # inspected before the worker's session creates it
    first = worker(
        "agent_worker",
        run_dir,
        str(tmp_path / "a.npz"),
        *("--epochs", "2", "--steps-per-epoch", "12", "--save-every-steps", "6"),
        *("--replicas", "1", "--heartbeat-seconds", "0.2", "--step-sleep", "0.1"),
        *("--tick-seconds", "3600", "--hang-at-step", "9"),
    )
    with first:
        first.skip_to("HANGING at step 9", timeout=120)  # training, past commit 6

        def beat_past_first_commit() -> bool:
            status = cr.inspect(run_dir)
            return status.checkpoint_step == 6 and status.step == 9

        wait_for(
            beat_past_first_commit,
            120,
            "a beat past the first commit",
            unless=first.exited_early,
        )
        first.kill()
    history_dir = os.path.join(run_dir, "history")
    chunks = os.listdir(history_dir) if os.path.isdir(history_dir) else []
    assert not [name for name in chunks if name.startswith("00000001-")]
    killed_beat = _beat(run_dir, 1)
    assert killed_beat["state"] == "training"

    # The same training (tests/workers/agent_worker.py's) run again, here;
    # its shuffle seeds depend on the global seed the worker sets.
    import keras

    keras.utils.set_random_seed(7)
    x, y = toy.regression(512)
    restored = []
    with cr.Agent(
        run_dir,
        save_every_steps=6,
        save_every_seconds=None,
        heartbeat_seconds=0.2,
        dead_after_seconds=0.6,
        prefer="cpu",
    ) as agent:
        agent.events.subscribe(
            lambda e: restored.append(e.step) if e.kind == "checkpoint.restored" else 0
        )
        agent.fit(
            toy.model,
            lambda epoch, skip=0: toy.epoch_batches(x, y, 16, epoch).skip(skip),
            epochs=2,
            steps_per_epoch=12,
            verbose=0,
        )
    assert restored == [6]

    report = read_report(Storage(run_dir))
    died, resumed = report.sessions
    assert (died.lease, died.end, died.first_step) == (1, "died", 0)
    assert died.last_step == killed_beat["step"] >= 8
    assert died.redone == (6, died.last_step)
    assert (resumed.lease, resumed.end, resumed.first_step) == (2, "completed", 6)
    assert resumed.last_step == 24 and resumed.redone is None
    assert report.deaths == [died]
    assert report.redone_steps == died.last_step - 6
    redone = died.last_step - 6
    assert died.describe() == (  # a beat is a lower bound of where it died
        f"session 1: died, last seen at step {died.last_step} "
        f"(at least {redone} step{'s' if redone != 1 else ''} redone, from step 6)"
    )
    assert 6 in report.commits and 24 in report.commits  # 6 pruned, yet known

    out = tmp_path / "report.png"
    assert main(["report", run_dir, "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG)


@pytest.mark.tf
def test_a_session_killed_after_commits_its_beat_never_showed_ends_at_them(
    tmp_path,
):
    """A real worker whose only beat is its first (they are an hour apart)
    commits checkpoints and is SIGKILLed before any history chunk; the
    successor restores its newest commit, then retention (keep=1) deletes
    it. The report still ends the dead session at that commit, known from
    the successor's restore, not at its last beat (which named no step)."""
    from support import toy, wait_for, worker

    import colab_resume as cr
    from colab_resume.protocol.listing import RunListing

    run_dir = str(tmp_path / "run")
    os.mkdir(run_dir)  # inspected before the worker's session creates it
    first = worker(
        "agent_worker",
        run_dir,
        str(tmp_path / "a.npz"),
        *("--epochs", "3", "--steps-per-epoch", "12", "--save-every-steps", "6"),
        *("--replicas", "1", "--heartbeat-seconds", "3600", "--step-sleep", "0.1"),
        *("--tick-seconds", "3600"),
    )
    with first:
        wait_for(
            lambda: (cr.inspect(run_dir).checkpoint_step or 0) >= 12,
            120,
            "a second commit",
            unless=first.exited_early,
        )
        first.kill()
    saved = RunListing.read(Storage(run_dir)).committed_step
    assert saved is not None and 12 <= saved < 36
    beat = _beat(run_dir, 1)
    assert beat["state"] == "starting" and beat["step"] is None  # no later beat
    assert not os.path.isdir(os.path.join(run_dir, "history"))

    import keras

    keras.utils.set_random_seed(7)  # the worker's training, run again here
    x, y = toy.regression(512)
    with cr.Agent(
        run_dir,
        save_every_steps=6,
        save_every_seconds=None,
        keep=1,
        heartbeat_seconds=0.2,
        prefer="cpu",
    ) as agent:
        agent.fit(
            toy.model,
            lambda epoch, skip=0: toy.epoch_batches(x, y, 16, epoch).skip(skip),
            epochs=3,
            steps_per_epoch=12,
            verbose=0,
        )
    listing = RunListing.read(Storage(run_dir))
    assert [d.name.lease for d in listing.committed] == [2]  # the first's pruned

    report = read_report(Storage(run_dir))
    died, resumed = report.sessions
    assert (died.end, died.first_step, died.last_step) == ("died", 0, saved)
    assert died.commits[-1] == saved and died.redone is None  # nothing after it
    assert (resumed.first_step, resumed.last_step) == (saved, 36)
    assert died.describe() == f"session 1: died, last seen at step {saved}"
    assert report.deaths == [died] and report.redone_steps == 0


@pytest.mark.tf
def test_stop_and_ctrl_c_are_clean_ends_not_deaths(tmp_path):
    """stop() and Ctrl-C (KeyboardInterrupt in the training thread, as SIGINT
    raises it) end their sessions cleanly; the report says so."""
    pytest.importorskip("tensorflow")
    from support.toy import tiny_fit_parts

    import colab_resume as cr

    build_model, data = tiny_fit_parts()
    run_dir = str(tmp_path / "run")

    def fit(on_step=None):
        with cr.Agent(run_dir, save_every_steps=4, prefer="cpu") as agent:
            if on_step is not None:
                agent.on_step(lambda step: on_step(agent, step))
            agent.fit(build_model, lambda e: data, epochs=2, steps_per_epoch=8)

    def stop_at_5(agent, step):
        if step == 5:
            agent.stop()

    def interrupt_at_10(agent, step):
        if step == 10:
            raise KeyboardInterrupt

    fit(stop_at_5)
    with pytest.raises(KeyboardInterrupt):
        fit(interrupt_at_10)
    fit()
    report = read_report(Storage(run_dir))
    assert [(s.end, s.first_step, s.last_step) for s in report.sessions] == [
        ("stopped", 0, 6),
        ("stopped", 6, 10),
        ("completed", 10, 16),
    ], [s.describe() for s in report.sessions]
    assert report.deaths == [] and report.redone_steps == 0


def test_a_session_taken_over_from_the_monitor_is_not_a_death(tmp_path):
    """A live holder fenced by the monitor's Take over: a takeover, and the
    Take over's own lease (which never trained) is no band."""
    from colab_resume.heartbeat import RunSession, SessionOptions, read_status
    from colab_resume.panel.monitor import MonitorPanel

    storage = Storage(str(tmp_path / "run"))
    holder = RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2))
    holder.update(state="training", step=20)
    wait_for(lambda: read_status(storage).step == 20, 60, "a beat with step 20")
    MonitorPanel(storage.url).take_over()
    holder.close("stopped")  # fenced: writes nothing more
    report = read_report(storage)
    first, takeover = report.sessions
    assert (first.end, first.first_step, first.last_step) == ("taken over", 0, 20)
    assert (takeover.end, takeover.trained) == ("stopped", False)
    assert report.deaths == []


def test_a_death_is_a_death_even_when_no_session_lived_to_write_its_history(
    tmp_path,
):
    """A holder process SIGKILLed on this host and taken at once by a
    session that itself never wrote history (as a rerun killed in its first
    seconds): the only word left is the new lease, which records the
    verdict it acted on. Judged by timing alone, a successor that came
    within the dead-after bound would have made this a takeover."""
    from support.processes import worker

    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.heartbeat.lease import read_lease

    run_dir = str(tmp_path / "run")
    storage = Storage(run_dir)
    holder = worker("holder", run_dir, "--heartbeat", "0.2")
    holder.expect("READY")
    beat = os.path.join(run_dir, "heartbeat", "00000001.json")
    wait_for(lambda: os.path.exists(beat), 60, "a beat of lease 1")
    holder.kill()
    successor = RunSession.open(storage, SessionOptions(heartbeat_seconds=0.2))
    successor.close("stopped")
    assert read_lease(storage, 2).previous_state == "DEAD"
    first, second = read_report(storage).sessions
    assert first.end == "died", first
    assert second.end == "stopped"


def test_a_death_is_drawn_at_its_last_commit_when_that_came_after_its_last_beat(
    tmp_path,
):
    """Beats and commits do not wait for each other: a session that beat at
    step 31, committed step 60 half a minute later and died is drawn dying
    at step 60, when that commit landed (both times the server's)."""
    from colab_resume.heartbeat import RunSession, SessionOptions
    from colab_resume.protocol import rundir

    storage = Storage(str(tmp_path / "run"))
    dying = RunSession.open(storage, SessionOptions(heartbeat_seconds=60))
    dying.update(state="training", step=31)
    dying.writer._beat()
    name = rundir.CheckpointName(step=60, lease=1)
    storage.write_bytes(f"{name.path}/ckpt.data", b"x")
    storage.write_json(name.manifest_path, {"step": 60})
    dying.writer.stop()  # no last word, as SIGKILL leaves none
    hour_ago = time.time() - 3600
    stamps = {rundir.lease_path(1): hour_ago, rundir.heartbeat_path(1): hour_ago}
    stamps[name.manifest_path] = hour_ago + 30
    for path, stamp in stamps.items():
        os.utime(os.path.join(storage.root, path), (stamp, stamp))
    RunSession.open(storage, SessionOptions(heartbeat_seconds=60)).close()

    died = read_report(storage).sessions[0]
    assert (died.end, died.last_step) == ("died", 60)
    assert died.ended_at == pytest.approx(hour_ago + 30, abs=1.0)


def test_a_lease_no_session_makes_leaves_the_history_drawn(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    record_session(storage, 1, range(1, 11), clean=True, t0=0.0)
    os.makedirs(os.path.join(storage.root, "lease"))
    with open(os.path.join(storage.root, "lease", "99999999.json"), "w") as file:
        file.write("{}")
    report = read_report(storage)
    assert [(s.lease, s.end) for s in report.sessions] == [(1, "completed")]
    assert any("99999999" in problem for problem in report.problems)

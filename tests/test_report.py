"""The run's history across sessions and the report drawn from it."""

from __future__ import annotations

import json
import os

import pytest

from colab_resume.cli import main
from colab_resume.events import EventLog
from colab_resume.report.history import HistoryRecorder, chunk_path, read_history
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

    from colab_resume.report.plot import session_spans

    spans = session_spans(history)
    assert [(s["lease"], s["died"], s["clean"]) for s in spans] == [
        (1, True, False),
        (2, False, True),
    ]
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
    import keras
    import numpy as np
    import tensorflow as tf

    import colab_resume as cr

    x = np.random.RandomState(0).randn(64, 4).astype("float32")

    def build_model():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        return model

    def make_dataset(epoch):
        return tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(8)

    agent = cr.Agent(str(tmp_path / "run"), save_every_steps=4, prefer="cpu")
    agent.telemetry.interval = 0.0  # sample every step in this short run
    panel = agent.panel()
    agent.fit(build_model, make_dataset, epochs=2, steps_per_epoch=8, verbose=0)
    panel.refresh()
    assert "completed" in panel.badge.value
    assert "step 16 / 16" in panel.progress.value
    assert "checkpoint: step 16" in panel.checkpoint.value
    history = read_history(agent.storage)
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

"""The panel in-process: what it shows given agent state, the tick's rate
limit, the buttons' wiring, the monitor, and that outside a kernel it is inert."""

from __future__ import annotations

import dataclasses
import html
import time

import pytest
from support import wait_for

import colab_resume as cr
from colab_resume.agent.progress import ProgressTracker
from colab_resume.events import Event
from colab_resume.panel.model import PanelFacts, facts_of, size, sparkline, view
from colab_resume.storage import Storage

pytest.importorskip("ipywidgets")


def test_view_of_a_training_run():
    facts = PanelFacts(
        state="training",
        now=1000.0,
        accelerator="TPU v5e-1 x1 (mixed_bfloat16)",
        step=500,
        total_steps=1000,
        epoch=4,
        steps_per_second=10.0,
        metrics={"loss": 0.25},
        series=[(i, 1.0 / (i + 1)) for i in range(50)],
        checkpoint_step=400,
        checkpoint_time=970.0,
        checkpoint_bytes=12_500_000,
        upload_rate=50e6,
        stall_count=2,
        stall_seconds=7.0,
        heartbeat_age_s=3.0,
        heartbeat_seconds=30.0,
        lease=2,
        session_id="abc123",
        host="vm",
        events=[Event(990.0, "recovery.started", "accelerator lost", "warning")],
    )
    v = view(facts)
    assert v.badge == "training" and v.buttons_enabled and v.pause_label == "Pause"
    assert "TPU v5e-1" in v.accelerator
    assert "step 500 / 1,000" in v.progress and "epoch 5" in v.progress
    assert "10.0 steps/s" in v.progress and "ETA 50s" in v.progress
    assert v.fraction == 0.5
    assert "step 400, 30s ago, 12.5 MB" in v.checkpoint
    assert "upload 50.0 MB/s" in v.checkpoint and "2 stall(s)" in v.checkpoint
    assert "3s ago (every 30s) · lease 2 · session abc123 on vm" in v.heartbeat
    assert v.events[0][1] == "10s ago · recovery.started: accelerator lost"
    assert v.chart_svg.startswith("<svg") and "polyline" in v.chart_svg


@pytest.mark.parametrize(
    ("state", "badge", "enabled", "pause"),
    [
        ("paused", "paused", True, "Resume"),
        ("stopped", "stopped", False, "Pause"),
        ("fenced", "fenced", False, "Pause"),
        ("completed", "completed", False, "Pause"),
        ("failed", "failed", False, "Pause"),
        ("recovering", "recovering", True, "Pause"),
    ],
)
def test_badges(state, badge, enabled, pause):
    v = view(PanelFacts(state=state, now=0.0))
    assert (v.badge, v.buttons_enabled, v.pause_label) == (badge, enabled, pause)


def test_waiting_shows_a_countdown_and_monitor_has_no_steering():
    v = view(PanelFacts(state="waiting", now=0.0, waiting_left_s=42.4))
    assert v.badge == "previous session silent: taking over in 42s"
    assert not view(PanelFacts(state="training", now=0, read_only=True)).buttons_enabled


def test_sparkline_needs_two_finite_values():
    assert sparkline([1.0]) == "" and sparkline([float("nan"), 1.0]) == ""
    assert 'points="0.0,4.0 160.0,30.0 320.0,56.0"' in sparkline([3.0, 2.0, 1.0])


def test_sparkline_names_its_scale():
    svg = sparkline([3.25, 2.0, 1.5])
    assert ">3.25</text>" in svg and ">loss</text>" in svg and ">1.5</text>" in svg


def test_metrics_read_apart_and_the_bar_takes_the_states_colour():
    facts = PanelFacts(state="paused", now=0.0, metrics={"loss": 0.25, "acc": 0.5})
    v = view(facts)
    assert v.metrics == "loss 0.25 · acc 0.5"  # two spaces would collapse in HTML
    assert v.bar_style == "warning"
    assert view(PanelFacts(state="training", now=0.0)).bar_style == ""
    assert view(PanelFacts(state="failed", now=0.0)).bar_style == "danger"


@pytest.mark.parametrize("state", ["stopped", "fenced", "completed", "failed"])
def test_an_ended_session_shows_no_age_that_would_freeze(state):
    facts = PanelFacts(
        state=state,
        now=100.0,
        checkpoint_step=40,
        checkpoint_time=99.0,
        checkpoint_bytes=2000,
        heartbeat_age_s=0.0,
        heartbeat_seconds=30.0,
        lease=1,
        events=[Event(3723.0, "run.stopped", "stopped at step 40", "warning")],
    )
    v = view(facts)
    # Nothing refreshes the panel after its session ends: "1s ago" would stay.
    assert "ago" not in v.checkpoint and "ago" not in v.heartbeat
    assert v.events[0][1] == "01:02:03 UTC · run.stopped: stopped at step 40"
    assert v.checkpoint == "checkpoint: step 40, 2.0 kB"
    assert v.heartbeat == "heartbeat: none since the session ended · lease 1"
    live = view(dataclasses.replace(facts, state="training"))
    assert "1s ago" in live.checkpoint and "0s ago (every 30s)" in live.heartbeat


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_tick_is_rate_limited_by_wall_clock(tmp_path):
    agent = cr.Agent(str(tmp_path / "run"))
    clock = FakeClock()
    telemetry = ProgressTracker(agent.events, agent._controls, clock=clock)
    calls = []
    telemetry.listeners.append(lambda: calls.append(clock.now))
    for _ in range(1000):
        telemetry.tick()  # many steps within the same second
    assert calls == [100.0]
    clock.now += 0.5
    telemetry.tick()
    assert len(calls) == 1
    clock.now += 0.6
    telemetry.tick()
    assert calls == [100.0, 101.1]


def test_a_tick_that_is_not_due_is_cheap(tmp_path):
    agent = cr.Agent(str(tmp_path / "run"))
    telemetry = ProgressTracker(agent.events, agent._controls)
    telemetry.tick()
    started = time.perf_counter()
    for _ in range(100_000):
        telemetry.tick()
    per_tick = (time.perf_counter() - started) / 100_000
    assert per_tick < 20e-6, per_tick  # generous: ~0.2 us here; a step is >= 1 ms


def test_buttons_set_the_agents_flags(tmp_path):
    agent = cr.Agent(str(tmp_path / "run"))
    panel = agent.panel()
    assert panel.pump is None  # no kernel here: nothing registered, inert
    assert agent._loop.progress.listeners == []  # internal: nothing registered
    controls = agent._controls  # internal: the flags the buttons set
    panel.save_button.click()
    assert controls.take_save_request()
    panel.pause_button.click()
    assert controls.paused and agent.progress().pause_requested
    panel.refresh()
    assert panel.pause_button.description == "Resume"
    panel.pause_button.click()
    assert not controls.paused
    panel.stop_button.click()
    assert controls.stop_requested
    assert "not started" in panel.badge.value


def test_printed_outside_a_notebook_the_panel_says_how_to_follow_the_run(tmp_path):
    agent = cr.Agent(str(tmp_path / "run"))
    shown = str(agent.panel())  # `print(agent.panel())` in a script
    assert f"colab-resume watch {agent.run_dir}" in shown
    assert "VBox" not in shown and repr(agent.panel()) == shown


def test_a_buttons_notice_lasts_until_the_run_acts(tmp_path):
    agent = cr.Agent(str(tmp_path / "run"))
    panel = agent.panel()
    panel.save_button.click()
    assert "checkpoint asked for" in panel.notice.value
    panel.refresh()  # nothing happened yet: the notice stays
    assert "checkpoint asked for" in panel.notice.value
    acted = dataclasses.replace(view(facts_of(agent.progress())), checkpoint_step=7)
    panel.show(acted)  # the checkpoint landed: the panel's lines say so now
    assert panel.notice.value == ""
    panel.say("a lasting notice")  # not tied to a click: stays
    panel.show(view(facts_of(agent.progress())))
    assert "a lasting notice" in panel.notice.value


def test_panel_follows_a_session(tmp_path):
    from colab_resume.heartbeat import RunSession, SessionOptions

    agent = cr.Agent(str(tmp_path / "run"))
    panel = agent.panel()
    # Internal: what taking the run does, without training.
    session = RunSession.open(agent._storage, SessionOptions(), events=agent.events)
    telemetry = agent._loop.progress
    telemetry.took_run(agent._storage, session, None)  # what taking the run pushes
    try:
        telemetry.session_started(total_steps=100, steps_per_epoch=10)
        session.update(state="training", step=0)
        telemetry.recorder.sample(5, {"loss": 2.0})
        telemetry.recorder.sample(10, {"loss": 1.0})
        panel.refresh()
        assert "starting" in panel.badge.value or "training" in panel.badge.value
        assert "lease 1" in panel.heartbeat.value
        assert "<svg" in panel.chart.value
        assert "lease.taken" in panel.events.value
    finally:
        session.close("stopped")
    panel.refresh()
    assert "stopped" in panel.badge.value


def test_monitor_reads_the_run_directory(tmp_path):
    from colab_resume.heartbeat import RunSession, SessionOptions, read_status
    from colab_resume.report.history import HistoryRecorder

    agent = cr.Agent(str(tmp_path / "run"))
    storage = Storage(agent.run_dir)
    session = RunSession.open(
        storage, SessionOptions(heartbeat_seconds=0.2), events=agent.events
    )
    recorder = HistoryRecorder(agent.events)
    recorder.start(storage, session.lease, session.session_id)
    session.update(state="training", step=20)
    for step in (10, 20):
        recorder.sample(step, {"loss": 1.0 / step})
    recorder.flush(wait=True)
    wait_for(lambda: read_status(storage).step == 20, 60, "a beat with step 20")
    monitor = cr.panel(agent.run_dir)
    assert "training" in monitor.badge.value
    assert "lease 1" in monitor.heartbeat.value
    assert "<svg" in monitor.chart.value
    assert "ALIVE" in monitor.detail.value
    assert monitor.watch(0.3, every=0.1) == "ALIVE"
    # Take over asks first, then fences the holder and frees the run.
    monitor.takeover_button.click()
    assert monitor.confirm.layout.display == "flex"
    monitor.confirm_button.click()
    assert monitor.took_over == 2
    # Released as a clean stop: takeable at once, and shown as such.
    assert cr.inspect(agent.run_dir).state == "STOPPED"
    assert not session.writer.verify_lease(storage)  # the holder is fenced
    session.close("stopped")
    monitor.refresh()
    assert "stopped" in monitor.badge.value and "STOPPED" in monitor.detail.value
    assert monitor.takeover_button.disabled
    assert "stopped cleanly" in monitor.takeover_button.tooltip


def test_take_over_is_offered_only_while_someone_holds_the_run():
    live = view(PanelFacts(state="training", now=0, read_only=True))
    assert live.takeover_enabled and "fence the holder" in live.takeover_tooltip
    for state in ("completed", "dead", "stopped", "new", "failed"):
        ended = view(PanelFacts(state=state, now=0, read_only=True))
        assert not ended.takeover_enabled, state
        assert "take" in ended.takeover_tooltip, state
    assert "completed" in view(PanelFacts(state="completed", now=0)).takeover_tooltip
    # The agent's own panel has no Take over at all.
    assert not view(PanelFacts(state="training", now=0)).takeover_enabled


def test_retention_deletions_are_one_line_among_the_events():
    from colab_resume.panel.model import event_lines

    events = [Event(1.0, "lease.taken", "took lease 1")]
    for i in range(12):
        names = [f"step-{i:09d}.e00000001"]
        events.append(
            Event(
                10.0 + i,
                "checkpoint.pruned",
                f"deleted 1 old or uncommitted checkpoint(s): {names[0]}",
                data={"checkpoints": names},
            )
        )
        events.append(Event(10.5 + i, "checkpoint.committed", f"step {i}"))
    events.append(Event(30.0, "storage.retry", "503, retrying", "warning"))
    lines = event_lines(events)
    assert [e.kind for e in lines] == [
        "lease.taken",
        "checkpoint.pruned",
        "storage.retry",
    ]
    assert lines[1].message == "retention deleted 12 old checkpoint(s) in 12 passes"
    assert lines[1].time == 21.0  # where the newest deletion happened
    # As the history keeps them (no data): counted from the message.
    recorded = [Event(e.time, e.kind, e.message) for e in events]
    assert event_lines(recorded)[1].message == lines[1].message


@pytest.mark.tf
def test_monitor_of_a_completed_run_offers_no_take_over(tmp_path):
    """A real fit with keep=1 prunes after every save; the monitor shows one
    line for all those deletions and no Take over on the completed run."""
    pytest.importorskip("tensorflow")
    from support.toy import tiny_fit_parts

    from colab_resume.protocol.listing import read_leases

    build_model, data = tiny_fit_parts()
    run_dir = str(tmp_path / "run")
    with cr.Agent(run_dir, save_every_steps=1, keep=1, prefer="cpu") as agent:
        agent.fit(build_model, lambda epoch: data, epochs=2, steps_per_epoch=8)
    monitor = cr.panel(run_dir)
    assert "completed" in monitor.badge.value
    assert monitor.takeover_button.disabled
    assert "completed" in monitor.takeover_button.tooltip
    assert monitor.events.value.count("checkpoint.pruned") == 1
    assert "retention deleted" in monitor.events.value
    assert "run.completed" in monitor.events.value  # not pushed out by deletions
    # Even a click that raced the refresh takes no lease on a completed run.
    monitor.take_over()
    assert monitor.took_over is None and len(read_leases(monitor.storage)) == 1
    assert "not taken over" in monitor.notice.value


@pytest.mark.parametrize(
    ("frozen", "shared", "said"),
    [
        ("once", 67_000_000, "(frozen='once': frozen base 67.0 MB stored once)"),
        ("once", 0, "(frozen='once')"),
        ("rebuild", 0, "(frozen='rebuild': frozen arrays not stored, rebuilt by"),
        ("every", 0, "(frozen='every': every array in every save)"),
    ],
)
def test_the_checkpoint_line_says_what_the_last_save_uploaded(frozen, shared, said):
    facts = PanelFacts(
        state="training",
        now=1000.0,
        checkpoint_step=120,
        checkpoint_time=970.0,
        checkpoint_bytes=1_800_000,
        checkpoint_uploaded_bytes=1_800_000,
        checkpoint_shared_bytes=shared,
        frozen=frozen,
    )
    line = view(facts).checkpoint
    assert line.startswith(f"checkpoint: step 120, 30s ago, 1.8 MB uploaded {said}")
    # Before the first commit the mode is known, nothing uploaded yet.
    early = dataclasses.replace(facts, checkpoint_step=None)
    assert (
        view(early).checkpoint == f"checkpoint: none committed yet (frozen='{frozen}')"
    )


@pytest.mark.tf
def test_the_panels_say_the_frozen_mode_and_the_bytes_each_save_uploaded(tmp_path):
    """A real fit with a frozen layer and frozen="once": its first save
    uploads the base, later ones only what trains; the agent's panel (from
    its events) and a monitor (from the history) both say so."""
    pytest.importorskip("tensorflow")
    import keras
    from support.toy import tiny_fit_parts

    _, data = tiny_fit_parts()

    def build_model():  # type: ignore[no-untyped-def]
        built = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(256), keras.layers.Dense(1)]
        )
        built.layers[0].trainable = False  # 4 x 256 + 256 floats: 5 kB frozen
        built.compile(optimizer="sgd", loss="mse")
        return built

    run_dir = str(tmp_path / "run")
    with cr.Agent(run_dir, save_every_steps=4, prefer="cpu", frozen="once") as agent:
        agent.fit(build_model, lambda epoch: data, epochs=1, steps_per_epoch=8)
        live = view(facts_of(agent.progress())).checkpoint
        [first, last] = agent.events.recent(kind="checkpoint.committed")
    assert first.data["uploaded_bytes"] > first.data["bytes"]  # the base, once
    assert last.data["uploaded_bytes"] == last.data["bytes"]
    uploaded = size(last.data["uploaded_bytes"])
    base = size(last.data["shared_bytes"])
    said = (
        f"step 8, {uploaded} uploaded (frozen='once': frozen base {base} stored once)"
    )
    assert said in live
    assert html.escape(said) in cr.panel(run_dir).checkpoint.value

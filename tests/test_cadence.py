"""``save_every="auto"``: the interval chosen from the run's measured costs.

The choice is checked on known figures; the trigger and the options with
their own classes; the whole in a real ``fit`` on TensorFlow (CPU) with a
real local run directory, and after a real SIGKILL the next session's
choice counts the death.
"""

from __future__ import annotations

import math

import pytest
from support.processes import run_cli, train_agent
from support.toy import tiny_fit_parts

from colab_resume.checkpoint.cadence import AutoCadence, Evidence
from colab_resume.checkpoint.triggers import SaveTriggers, TriggerOptions
from colab_resume.report.goodput import evidence_before
from colab_resume.report.history import read_history
from colab_resume.storage import Storage
from colab_resume.timings import Timings


def test_without_a_failure_the_prior_sets_the_interval():
    timings = Timings(save=2.0, saves=4, step_seconds=0.0)
    choice = AutoCadence(Evidence(), timings, prior=3600.0).choose()
    assert choice.seconds == pytest.approx(math.sqrt(2 * 0.5 * 3600.0))
    assert choice.failures == 0
    assert "none seen yet" in choice.describe()


def test_failures_seen_pull_the_interval_towards_what_they_say():
    evidence = Evidence(training=7200.0, failures=3, save_seconds=1.0, saves=2)
    choice = AutoCadence(evidence, Timings(), prior=3600.0).choose()
    # The prior weighs a tenth of a failure: the three seen decide.
    between = (7200.0 + 360.0) / 3.1
    assert choice.between_failures == pytest.approx(between)
    assert choice.seconds == pytest.approx(math.sqrt(2 * 0.5 * between))
    assert "3 seen" in choice.describe()


def test_the_prior_is_the_users_to_set():
    """``save_every_prior_seconds`` reaches the chooser: a platform known to
    kill sessions every few minutes is believed before any death is seen."""
    from colab_resume.agent.options import AgentOptions

    options = AgentOptions(save_every="auto", save_every_prior_seconds=300.0)
    assert options.triggers.auto_prior_seconds == 300.0
    timings = Timings(save=2.0, saves=4, step_seconds=0.0)
    choice = AutoCadence(
        Evidence(), timings, floor=1.0, prior=options.triggers.auto_prior_seconds
    ).choose()
    assert choice.seconds == pytest.approx(math.sqrt(2 * 0.5 * 300.0))


def test_what_a_save_pays_once_does_not_price_the_others():
    """A build's first save costs tens of times a later one (it sets up
    what they reuse) and an epoch's first save takes the data fingerprint;
    both are paid whatever the interval: ``C`` leaves them out once a
    later save was measured, in this session and earlier ones."""
    evidence = Evidence(
        save_seconds=0.06 * 3 + 0.002 * 30 + 0.04, saves=33,
        save_setup=0.18 + 0.04, first_saves=3,
    )  # fmt: skip
    timings = Timings(
        save=0.06 + 0.002 * 9 + 0.05, saves=10, save_setup=0.11, first_saves=1
    )
    choice = AutoCadence(evidence, timings, floor=0.0, prior=100.0).choose()
    assert choice.save_cost == pytest.approx(0.002)
    assert choice.seconds == pytest.approx(math.sqrt(2 * 0.002 * 100.0))
    # Only a first save measured so far: the next comes at the floor, to
    # measure one that is not.
    alone = Timings(save=0.06, saves=1, save_setup=0.06, first_saves=1)
    choice = AutoCadence(Evidence(), alone, floor=5.0).choose()
    assert choice.seconds == 5.0 and choice.save_cost is None


def test_an_epochs_fingerprint_is_timed_once():
    """What the epoch's first save pays for its data fingerprint is what
    ``record`` returns: the time it took once, nothing after."""
    tf = pytest.importorskip(
        "tensorflow", reason="the fingerprinted pipeline is a tf.data one here"
    )
    from colab_resume.agent.fingerprints import DataFingerprints

    def make_dataset(epoch: int, skip: int = 0):
        return tf.data.Dataset.range(64).map(lambda i: i * 2).batch(8)

    fingerprints = DataFingerprints(make_dataset)
    assert fingerprints.record(0) > 0
    assert fingerprints.record(0) == 0.0
    assert fingerprints.record(1) > 0 and set(fingerprints.seen) == {"0", "1"}


def test_the_first_save_comes_at_the_floor_to_measure_one():
    choice = AutoCadence(Evidence(), Timings(), floor=45.0).choose()
    assert choice.seconds == 45.0 and choice.save_cost is None
    assert "measuring" in choice.describe()


def test_bounds_and_the_upload_budget():
    cheap = Timings(save=0.001, saves=1)
    assert AutoCadence(Evidence(), cheap, floor=30.0).choose().limited_by == "floor"
    dear = Timings(save=500.0, saves=1)
    held = AutoCadence(Evidence(), dear, ceiling=600.0).choose()
    assert held.seconds == 600.0 and held.limited_by == "ceiling"
    # 10 GB checkpoints into a 750 GB/day allowance, half of it ours: one
    # every 2,304 s at most, above the ceiling too.
    budget = AutoCadence(
        Evidence(),
        cheap,
        ceiling=600.0,
        daily_upload_bytes=750e9,
        checkpoint_bytes=lambda: 10_000_000_000,
    ).choose()
    assert budget.seconds == pytest.approx(10e9 * 86_400 / 375e9)
    assert budget.limited_by == "upload budget"
    # What it replaced: the floor, where so cheap a save put the interval.
    assert budget.budget is not None and budget.budget.instead_of == 30.0


# M = (W + k·M₀) / k with no failure seen: with the 20 s the tallies below
# trained, this prior puts failures an hour of training apart.
PRIOR = 3600.0 - 20.0 / 0.1


def test_the_upload_cap_sets_the_interval_and_says_what_it_replaced():
    """A 10 GB checkpoint on Drive, a save costing 0.5 s and failures an
    hour apart: Young's interval is 60 s, the upload cap asks for 2,304 s
    (375 GB a day, half of the 750 GB), and the words say both, in steps
    of the measured 2 s each, with what one save uploads and the cap."""
    timings = Timings(save=1.0, saves=2, step_seconds=20.0, steps=10)
    choice = AutoCadence(
        Evidence(),
        timings,
        floor=1.0,
        prior=PRIOR,
        daily_upload_bytes=750e9,
        service="Drive",
        checkpoint_bytes=lambda: 10_000_000_000,
    ).choose()
    young = math.sqrt(2 * 0.5 * 3600.0)
    assert choice.seconds == pytest.approx(2304.0)
    assert choice.limited_by == "upload budget"
    assert choice.budget is not None
    assert choice.budget.instead_of == pytest.approx(young)
    # At the chosen interval the run uploads exactly half the cap a day.
    assert choice.budget.per_day(choice.seconds) == pytest.approx(375e9)
    assert choice.describe() == (
        "saving every 38m24s (auto), about 1,152 steps, not 1m00s (about 30): "
        "each save uploads 10,000.0 MB and Drive allows 750 GB a day, of which "
        "checkpoints take at most 50%; a save holds training 0.5 s, a failure "
        "every 1h00m of training (none seen yet, a prior)"
    )
    data = choice.data()
    assert data["limited_by"] == "upload budget"
    assert data["save_bytes"] == 10_000_000_000
    assert data["daily_upload_bytes"] == 750e9
    assert data["instead_of_seconds"] == pytest.approx(young)
    assert data["bytes_per_day"] == pytest.approx(375e9)


@pytest.mark.parametrize(
    "cap, nbytes",
    [
        (750e9, 100_000_000),  # 100 MB: 23 s of budget, under Young's 60 s
        (None, 10_000_000_000),  # Cloud Storage: no daily cap
        (750e9, None),  # nothing committed or restored yet
    ],
)
def test_the_upload_cap_leaves_alone_what_it_allows(cap, nbytes):
    timings = Timings(save=1.0, saves=2, step_seconds=20.0, steps=10)
    choice = AutoCadence(
        Evidence(),
        timings,
        floor=1.0,
        prior=PRIOR,
        daily_upload_bytes=cap,
        checkpoint_bytes=lambda: nbytes,
    ).choose()
    assert choice.seconds == pytest.approx(math.sqrt(2 * 0.5 * 3600.0))
    assert choice.limited_by is None and choice.budget is None
    assert "uploads" not in choice.describe()
    assert "save_bytes" not in choice.data()


def test_the_cap_taking_over_is_news_even_where_the_interval_barely_moved():
    """Young's interval 60 s, then a checkpoint's size known that asks for
    66 s: a tenth longer, under the fifth that makes a move news, yet the
    reason changed and the event says so; once, not at every save."""
    now = [0.0]
    committed: list[int | None] = [None]
    timings = Timings(save=1.0, saves=2)
    cadence = AutoCadence(
        Evidence(),
        timings,
        floor=1.0,
        prior=3600.0,
        daily_upload_bytes=750e9,
        checkpoint_bytes=lambda: committed[0],
    )
    triggers = SaveTriggers(
        TriggerOptions(every="auto"), clock=lambda: now[0], cadence=cadence
    )
    assert triggers.new_choice().budget is None
    committed[0] = round(66.0 * 375e9 / 86_400)
    triggers.saved(1, "auto")
    capped = triggers.new_choice()
    assert capped is not None and capped.seconds == pytest.approx(66.0)
    assert capped.limited_by == "upload budget"
    triggers.saved(2, "auto")
    assert triggers.new_choice() is None


def test_the_trigger_uses_the_choice_and_rechooses_after_each_save():
    now = [0.0]
    timings = Timings()
    cadence = AutoCadence(Evidence(), timings, floor=10.0, prior=3600.0)
    triggers = SaveTriggers(
        TriggerOptions(every="auto"), clock=lambda: now[0], cadence=cadence
    )
    assert triggers.new_choice().seconds == 10.0  # the first: news
    assert triggers.new_choice() is None
    now[0] = 9.0
    assert triggers.due(5) is None  # the default 600 s is replaced, not added
    now[0] = 10.0
    assert triggers.due(6) == "auto"
    timings.save, timings.saves = 0.5, 1
    triggers.saved(6, "auto")
    moved = triggers.new_choice()
    assert moved is not None and moved.seconds == pytest.approx(math.sqrt(3600.0))


def test_auto_off_keeps_the_fixed_triggers():
    now = [0.0]
    triggers = SaveTriggers(
        TriggerOptions(every_seconds=5.0),
        clock=lambda: now[0],
        cadence=AutoCadence(Evidence(), Timings()),
    )
    now[0] = 6.0
    assert triggers.choice is None and triggers.due(1) == "seconds"


@pytest.mark.parametrize(
    "options, match",
    [
        ({"save_every": "often"}, "'auto' or None"),
        ({"save_every": "auto", "save_every_floor_seconds": -1}, "floor"),
        ({"save_every": "auto", "save_every_prior_seconds": 0}, "prior"),
        (
            {
                "save_every": "auto",
                "save_every_floor_seconds": 100,
                "save_every_ceiling_seconds": 10,
            },
            "above",
        ),
    ],
)
def test_bad_auto_options_are_named(options, match):
    from colab_resume.agent.options import AgentOptions

    with pytest.raises(ValueError, match=match):
        AgentOptions(**options)


def test_auto_alone_is_a_cadence():
    from colab_resume.agent.options import AgentOptions

    options = AgentOptions(save_every="auto")
    assert options.triggers.auto
    with pytest.raises(ValueError, match="in place of save_every_seconds"):
        AgentOptions(save_every="auto", save_every_seconds=60)


def test_a_fit_with_auto_saves_says_why_and_the_next_session_counts_a_death(
    tmp_path,
):
    """A real fit, ``save_every="auto"`` with bounds that make every step's
    interval due: saves happen for the reason "auto" and the choice is an
    event. Then a session SIGKILLed mid-run: the next one's evidence counts
    that death."""
    pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow here")
    import colab_resume as cr

    build_model, data = tiny_fit_parts()  # a Dense(1), 8 batches an epoch

    def make_dataset(epoch: int):
        return data

    agent = cr.Agent(
        str(tmp_path / "run"),
        prefer="cpu",
        save_every="auto",
        save_every_floor_seconds=1e-4,
        save_every_ceiling_seconds=1e-4,
    )
    agent.fit(build_model, make_dataset, epochs=2, steps_per_epoch=4, verbose=0)
    # What the saves paid once (the build's first save, the second epoch's
    # data fingerprint) is kept apart for the price of a save.
    tally = read_history(Storage(str(tmp_path / "run"))).timings[1]
    assert tally.first_saves == 1 and tally.saves > 2
    assert 0 < tally.save_setup < tally.save
    said = agent.events.recent(kind="checkpoint.cadence")
    assert said and "saving every" in said[0].message and "(auto)" in said[0].message
    assert agent.goodput().sessions[0].buckets["UNPRODUCTIVE_CHECKPOINT_SAVE_TIME"] > 0
    # Anyone can read the choice: status shows the last one the run said.
    status = run_cli("status", str(tmp_path / "run"), expect_rc=0).stdout
    assert "saving every" in status and "(auto)" in status

    killed = str(tmp_path / "killed")
    first = train_agent(
        killed, str(tmp_path / "a.npz"), "--kill-at-step", "20",
        "--tick-seconds", "0.05", expect_rc=-9,
    )  # fmt: skip
    assert "KILLING at step 20" in first.stdout
    evidence = evidence_before(Storage(killed), lease=2)
    assert evidence.failures == 1
    assert evidence.training > 0


def test_on_drive_the_upload_cap_sets_the_interval_from_the_first_save(
    drive_run_dir, drive_options
):
    """A real fit on the Drive emulator (the real Drive store, its real
    750 GB a day), with a floor and ceiling of a microsecond: a checkpoint
    of a few kilobytes asks for more than that, so the cap sets the
    interval, priced from the committed checkpoint's size, and the event
    says so. The next session knows the size from the checkpoint it
    restored: its first choice is already held by the cap."""
    pytest.importorskip("tensorflow", reason="the agent trains with TensorFlow here")
    import colab_resume as cr
    from colab_resume.checkpoint.cadence import budget_interval

    build_model, data = tiny_fit_parts()  # a Dense(1), 8 batches an epoch

    def make_dataset(epoch: int):
        return data

    def fit(epochs: int) -> cr.Agent:
        agent = cr.Agent(
            drive_run_dir,
            storage_options=drive_options,
            prefer="cpu",
            save_every="auto",
            save_every_floor_seconds=1e-6,
            save_every_ceiling_seconds=1e-6,
        )
        agent.fit(
            build_model, make_dataset, epochs=epochs, steps_per_epoch=4, verbose=0
        )
        return agent

    first = fit(1)
    sizes = {e.data["bytes"] for e in first.events.recent(kind="checkpoint.committed")}
    capped = [
        e
        for e in first.events.recent(kind="checkpoint.cadence")
        if e.data["limited_by"] == "upload budget"
    ]
    assert capped, [e.message for e in first.events.recent(kind="checkpoint")]
    said = capped[0]
    assert said.data["save_bytes"] in sizes
    assert said.data["daily_upload_bytes"] == 750e9
    assert said.data["seconds"] == pytest.approx(
        budget_interval(said.data["save_bytes"], 750e9)
    )
    assert said.data["instead_of_seconds"] == pytest.approx(1e-6)
    assert "each save uploads" in said.message
    assert "Drive allows 750 GB a day" in said.message

    second = fit(2)
    (restored,) = second.events.recent(kind="checkpoint.restored")
    opening = second.events.recent(kind="checkpoint.cadence")[0]
    assert opening.data["limited_by"] == "upload budget"
    assert opening.data["save_bytes"] in sizes

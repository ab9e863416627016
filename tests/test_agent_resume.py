"""docs/DESIGN.md §6 guarantees 1 and 3 end to end: TF, SIGKILLs, GCS emulator.

Every run trains the same small Keras model (Dense, Dropout, BatchNorm,
Adam) under a 2-replica MirroredStrategy with op determinism; a run that is
killed and resumed, or that loses its "accelerator" mid-run, must end with
every model and optimizer variable bitwise equal to an uninterrupted run.
"""

from __future__ import annotations

import json
import random
import time

import numpy as np
import pytest
from support import assert_bitwise_equal as assert_same_bits
from support import steps_here, train_agent, wait_for, worker

from colab_resume.report.history import read_history
from colab_resume.storage import Storage

TOTAL_STEPS = 36  # 3 epochs x 12 steps, a checkpoint every 5


# The agent worker, run and awaited (one helper for both suites).
train = train_agent


def assert_bitwise_equal(expected: str, actual: str) -> None:
    # Dropout's RNG state and Adam's slots are among what must match.
    assert_same_bits(expected, actual, must_contain=["seed_generator"])
    names = list(np.load(expected).files)
    assert any("adam" in k.lower() or "momentum" in k for k in names)


@pytest.fixture(scope="module")
def reference_fit(tmp_path_factory) -> str:
    """An uninterrupted run (local run dir: storage does not change the weights)."""
    base = tmp_path_factory.mktemp("reference-fit")
    out = str(base / "weights.npz")
    result = train(str(base / "run"), out)
    assert steps_here(result) == TOTAL_STEPS
    return out


@pytest.fixture(scope="module")
def reference_loop(tmp_path_factory) -> str:
    base = tmp_path_factory.mktemp("reference-loop")
    out = str(base / "weights.npz")
    train(str(base / "run"), out, "--loop", "run")
    return out


def test_fit_killed_during_an_upload_resumes_bitwise(
    reference_fit, gcs_run_dir, emulator, tmp_path
):
    out = str(tmp_path / "w.npz")
    # Step 15 is a save step: the kill lands while that checkpoint uploads.
    # Beats of 10 s (the default): the rerun, on the same machine, must not
    # wait out their 30 s of silence, since the killed process is provably gone.
    killed = train(
        gcs_run_dir,
        out,
        *("--kill-at-step", "15", "--heartbeat-seconds", "10"),
        endpoint=emulator.url,
        expect_rc=-9,
    )
    assert "KILLING at step 15" in killed.stdout
    events = str(tmp_path / "events.json")
    resumed = train(gcs_run_dir, out, "--events", events, endpoint=emulator.url)
    # Resumed from step 15 if its upload had committed, else from step 10.
    assert steps_here(resumed) in (TOTAL_STEPS - 15, TOTAL_STEPS - 10)
    assert "HISTORY [0, 1, 2]" in resumed.stdout  # History spans the restart
    assert_bitwise_equal(reference_fit, out)
    kinds = {e["kind"]: e for e in json.loads(open(events).read())}
    assert kinds["lease.previous_dead"]["data"]["process_gone"] is True
    assert "lease.waiting" not in kinds


def test_fit_recovers_from_a_lost_accelerator_in_session(
    reference_fit, gcs_run_dir, emulator, tmp_path
):
    """An UnavailableError from a callback stands in for a lost TPU (none here)."""
    out = str(tmp_path / "w.npz")
    result = train(
        gcs_run_dir, out, "--unavailable-at-step", "17", endpoint=emulator.url
    )
    assert "recoveries=1" in result.stdout
    # Work lost is at most the save interval: restored from step 15.
    assert steps_here(result) == TOTAL_STEPS + (17 - 15)
    assert_bitwise_equal(reference_fit, out)


def test_custom_loop_killed_and_resumed_bitwise(
    reference_loop, gcs_run_dir, emulator, tmp_path
):
    out = str(tmp_path / "w.npz")
    train(
        gcs_run_dir,
        out,
        "--loop",
        "run",
        "--kill-at-step",
        "22",
        endpoint=emulator.url,
        expect_rc=-9,
    )
    resumed = train(gcs_run_dir, out, "--loop", "run", endpoint=emulator.url)
    # Step 20's upload may not have committed two steps later: then step 15.
    assert steps_here(resumed) in (TOTAL_STEPS - 20, TOTAL_STEPS - 15)
    assert_bitwise_equal(reference_loop, out)


def recorded_losses(run_dir: str) -> dict[int, float]:
    """The loss the run's history recorded, by step."""
    points = read_history(Storage(run_dir)).points
    return {p.step: p.metrics["loss"] for p in points if "loss" in p.metrics}


def test_custom_loop_records_the_same_loss_on_1_and_2_replicas(tmp_path):
    """The recorded loss is the global batch's: per-replica shares are summed."""
    losses = {}
    for replicas in (1, 2):
        run_dir = str(tmp_path / f"run{replicas}")
        out = str(tmp_path / f"w{replicas}.npz")
        args = ["--loop", "run", "--plain", "--replicas", str(replicas)]
        train(run_dir, out, *args)
        losses[replicas] = recorded_losses(run_dir)
    assert TOTAL_STEPS in losses[1] and TOTAL_STEPS in losses[2]
    one, two = losses[1][TOTAL_STEPS], losses[2][TOTAL_STEPS]
    # Averaging the replicas' shares instead would record half of it.
    assert two == pytest.approx(one, rel=1e-4), (one, two)


def test_session_killed_in_its_first_seconds_leaves_its_history(tmp_path):
    """A commit brings a history chunk; the session's first one within a tick."""
    run_dir = str(tmp_path / "run")
    # The first checkpoint commits after step 5, the kill lands ~2 s later:
    # long before the 10 s the recorder otherwise keeps between chunks.
    killed = train(
        run_dir,
        str(tmp_path / "w.npz"),
        *("--step-sleep", "0.1", "--kill-at-step", "25"),
        expect_rc=-9,
    )
    assert "KILLING at step 25" in killed.stdout
    history = read_history(Storage(run_dir))
    assert 1 in history.sessions, "no history chunk of the killed session"
    committed = [e.step for e in history.events if e.kind == "checkpoint.committed"]
    assert committed and committed[0] == 5
    assert history.points and history.points[0].lease == 1


def test_random_external_kills_then_completed_run_returns_at_once(
    reference_fit, gcs_run_dir, emulator, gcs_options, tmp_path
):
    """SIGKILL from outside at random instants, twice; then finish; then rerun."""
    out = str(tmp_path / "w.npz")
    storage = Storage(gcs_run_dir, gcs_options)
    rng = random.Random(1234)
    for _ in range(2):
        proc = worker("agent_worker", gcs_run_dir, out, "--endpoint", emulator.url)
        # Wait until training is under way (a lease exists), then a random delay.
        wait_for(
            lambda: storage.list("lease/"),
            60,
            "the worker's lease",
            interval=0.2,
            unless=proc.exited_early,
        )
        time.sleep(rng.uniform(3.0, 5.0))  # the kill's random instant, not a wait
        proc.kill()
    train(gcs_run_dir, out, endpoint=emulator.url)
    assert_bitwise_equal(reference_fit, out)
    again = train(gcs_run_dir, str(tmp_path / "again.npz"), endpoint=emulator.url)
    assert steps_here(again) == 0  # COMPLETED: restored, nothing retrained
    assert_bitwise_equal(reference_fit, str(tmp_path / "again.npz"))


def test_non_deterministic_dataset_is_detected_on_resume(
    gcs_run_dir, emulator, tmp_path
):
    out = str(tmp_path / "w.npz")
    train(
        gcs_run_dir,
        out,
        "--unseeded-shuffle",
        "--kill-at-step",
        "15",
        endpoint=emulator.url,
        expect_rc=-9,
    )
    result = train(
        gcs_run_dir, out, "--unseeded-shuffle", endpoint=emulator.url, expect_rc=1
    )
    assert "NonDeterministicDatasetError" in result.stderr
    assert "shuffle with a seed" in result.stderr


@pytest.mark.parametrize("driver", ["run", "fit"])
def test_fixed_pipeline_resumes_once_fingerprints_are_reset(tmp_path, driver):
    """After the error, fixing make_dataset is not enough: the checkpoint holds
    the old pipeline's fingerprints until reset_data_fingerprints=True."""
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "w.npz")
    events = str(tmp_path / "events.json")
    loop = ("--loop", driver)
    train(
        run_dir, out, *loop, "--unseeded-shuffle", "--kill-at-step", "15", expect_rc=-9
    )
    fixed = train(run_dir, out, *loop, expect_rc=1)  # seeded now, old fingerprints
    assert "NonDeterministicDatasetError" in fixed.stderr
    assert "reshuffle_each_iteration=False" in fixed.stderr
    assert "reset_data_fingerprints=True" in fixed.stderr
    reset = train(
        run_dir,
        out,
        *loop,
        *("--reset-data-fingerprints", "--events", events),
        *("--kill-at-step", "27"),
        expect_rc=-9,
    )
    assert "EVENT data.fingerprints_reset" in reset.stdout
    assert "discarded the data fingerprints of epochs 0" in reset.stdout
    # The new fingerprints guard the next resume, without the option.
    again = train(run_dir, out, *loop)
    assert steps_here(again) in (TOTAL_STEPS - 25, TOTAL_STEPS - 20)

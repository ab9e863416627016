"""Training through storage chaos: real HTTP faults, real TF, bitwise results.

A worker process (``tests/workers/agent_worker.py``) trains through the
fault-injecting proxy; its weights must be bitwise those of a clean run,
and the proxy's counters prove the faults were really there.
"""

from __future__ import annotations

import json

import pytest
from support import Process, assert_bitwise_equal, wait_for, worker
from support.faultproxy import FaultMix

from colab_resume.protocol.listing import RunListing
from colab_resume.storage import Storage

SAVE_STEPS = [5, 10, 15, 20, 25, 30, 35, 36]  # 36 steps, a save every 5, final


def start(run_dir: str, out: str, *args: str) -> Process:
    return worker("agent_worker", run_dir, out, *args)


def finish(proc: Process, expect_rc: int = 0) -> tuple[str, str]:
    result = proc.finish(expect_rc, timeout=300)
    return result.stdout, result.stderr


def events(path: str) -> list[dict]:
    with open(path) as handle:
        return json.load(handle)


def kinds(evs: list[dict], kind: str) -> list[dict]:
    return [e for e in evs if e["kind"] == kind]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:
    """An uninterrupted, fault-free run on a local directory."""
    base = tmp_path_factory.mktemp("chaos-reference")
    out = str(base / "w.npz")
    finish(start(str(base / "run"), out))
    return out


def test_training_through_5xx_resets_and_stalls_is_bitwise(
    reference, gcs_run_dir, fault_proxy, tmp_path
):
    fault_proxy.set_mix(
        FaultMix(
            error_rate=0.08,
            reset_rate=0.02,
            stall_rate=0.01,
            stall_seconds=1.0,
            statuses=(500, 503, 429),
            seed=3,
        )
    )
    out, evs = str(tmp_path / "w.npz"), str(tmp_path / "events.json")
    finish(start(gcs_run_dir, out, "--endpoint", fault_proxy.url, "--events", evs))
    counts = fault_proxy.counts
    assert counts["error"] >= 3 and counts["reset"] >= 1, counts
    assert_bitwise_equal(reference, out)
    log = events(evs)
    assert kinds(log, "storage.retry")  # the faults were seen, and retried
    assert not kinds(log, "checkpoint.failed")
    committed = sorted(e["step"] for e in kinds(log, "checkpoint.committed"))
    assert committed == SAVE_STEPS  # every save committed, none lost


def test_outage_longer_than_a_save_interval_waits_and_catches_up(
    reference, gcs_run_dir, gcs_options, fault_proxy, tmp_path
):
    """Storage goes away until a save has waited on it, then comes back.

    The outage lasts until the worker reports that a save is blocked on the
    upload the outage holds up (however slow a loaded machine makes steps),
    and a while longer, so that the save that came due in it really waits.
    """
    out, evs = str(tmp_path / "w.npz"), str(tmp_path / "events.json")
    proc = start(
        gcs_run_dir,
        out,
        "--endpoint",
        fault_proxy.url,
        "--events",
        evs,
        "--step-sleep",
        "0.2",
    )
    direct = Storage(gcs_run_dir, gcs_options)
    wait_for(
        lambda: _committed_steps(direct),
        120,
        "a committed checkpoint",
        interval=0.1,
        unless=proc.exited_early,
    )
    before = _committed_steps(direct)
    fault_proxy.start_outage(kind="503")
    try:
        proc.skip_to("EVENT checkpoint.waiting", timeout=120)
        wait_for(
            lambda: fault_proxy.counts["outage"] >= 5,
            60,
            "five requests failed by the outage",
            interval=0.1,
        )
    finally:
        fault_proxy.end_outage()
    finish(proc)
    assert fault_proxy.counts["outage"] >= 5, fault_proxy.counts
    assert_bitwise_equal(reference, out)
    log = events(evs)
    assert kinds(log, "storage.retry")
    assert kinds(log, "checkpoint.waiting")  # said so while it waited
    assert kinds(log, "checkpoint.stall")  # the next save waited for storage
    assert not kinds(log, "checkpoint.failed")
    committed = sorted(e["step"] for e in kinds(log, "checkpoint.committed"))
    assert committed == SAVE_STEPS  # the ones due in the outage committed later
    assert set(before) <= set(committed)


def test_outage_beyond_the_retry_budget_fails_clearly_and_resumes_later(
    reference, gcs_run_dir, gcs_options, fault_proxy, tmp_path
):
    out, evs = str(tmp_path / "w.npz"), str(tmp_path / "events.json")
    proc = start(
        gcs_run_dir,
        out,
        "--endpoint",
        fault_proxy.url,
        "--events",
        evs,
        "--step-sleep",
        "0.1",
        "--retry-seconds",
        "2",
    )
    direct = Storage(gcs_run_dir, gcs_options)
    wait_for(
        lambda: _committed_steps(direct),
        120,
        "a committed checkpoint",
        interval=0.1,
        unless=proc.exited_early,
    )
    committed_before = _committed_steps(direct)
    fault_proxy.start_outage(kind="reset")
    try:
        _, stderr = finish(proc, expect_rc=1)
    finally:
        fault_proxy.end_outage()
    assert fault_proxy.counts["outage"] >= 3
    assert "StorageUnavailableError" in stderr
    assert "retry budget" in stderr or "kept failing" in stderr
    log = events(evs)
    assert kinds(log, "checkpoint.failed")
    # The agent made one last save attempt before giving up, and said so.
    assert kinds(log, "checkpoint.final_failed")
    # Nothing committed was lost; the next session continues bitwise.
    assert set(committed_before) <= set(_committed_steps(direct))
    finish(start(gcs_run_dir, out, "--endpoint", fault_proxy.url))
    assert_bitwise_equal(reference, out)


def test_agent_trains_on_while_only_heartbeats_fail(
    reference, gcs_run_dir, gcs_options, fault_proxy, tmp_path
):
    """Every heartbeat write fails for a while: reported, never fatal."""
    out, evs = str(tmp_path / "w.npz"), str(tmp_path / "events.json")
    proc = start(
        gcs_run_dir,
        out,
        "--endpoint",
        fault_proxy.url,
        "--events",
        evs,
        "--step-sleep",
        "0.3",
        "--heartbeat-seconds",
        "0.3",
    )
    direct = Storage(gcs_run_dir, gcs_options)
    wait_for(
        lambda: _committed_steps(direct),
        120,
        "a committed checkpoint",
        interval=0.1,
        unless=proc.exited_early,
    )
    fault_proxy.set_mix(
        FaultMix(error_rate=1.0, statuses=(503,), body_match=b"/heartbeat/")
    )
    # The fault lasts until three beats in a row failed (each retries for
    # 2 s), which the worker reports as an error, however slow the machine.
    wait_for(
        lambda: "EVENT heartbeat.failed level=error" in proc.stdout,
        180,
        "three failed heartbeats in a row",
        interval=0.1,
        unless=proc.exited_early,
    )
    fault_proxy.set_mix(FaultMix())
    finish(proc)
    assert fault_proxy.counts["error:503"] >= 3, fault_proxy.counts
    assert_bitwise_equal(reference, out)
    log = events(evs)
    failed = kinds(log, "heartbeat.failed")
    assert [e for e in failed if e["level"] == "error"], failed
    assert "Training continues" in failed[0]["message"]
    assert kinds(log, "heartbeat.recovered")
    assert not kinds(log, "checkpoint.failed")


def _committed_steps(storage: Storage) -> list[int]:
    return sorted(d.name.step for d in RunListing.read(storage).committed)

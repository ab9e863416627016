"""Pure parts of the checkpoint package: triggers, retention, manifest, progress."""

from __future__ import annotations

import sys

import pytest

from colab_resume.checkpoint import Manifest, SaveTriggers, TriggerOptions
from colab_resume.checkpoint.retention import plan
from colab_resume.checkpoint.transfer_progress import TransferProgress
from colab_resume.errors import CorruptRecordError
from colab_resume.events import EventLog
from colab_resume.protocol.listing import CheckpointDir
from colab_resume.protocol.manifest import FileEntry, crc32c_bytes
from colab_resume.protocol.rundir import MANIFEST, CheckpointName
from colab_resume.storage import ObjectInfo


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- triggers -----------------------------------------------------------------


def test_import_does_not_import_tensorflow():
    assert "colab_resume.checkpoint" in sys.modules
    import subprocess

    code = "import sys, colab_resume.checkpoint; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_step_trigger_counts_from_last_save():
    clock = Clock()
    t = SaveTriggers(TriggerOptions(every_steps=10, every_seconds=None), clock=clock)
    assert [t.due(s) for s in (1, 9)] == [None, None]
    assert t.due(10) == "steps"
    t.saved(10)
    assert t.due(15) is None and t.due(20) == "steps"


def test_time_trigger_uses_injected_clock():
    clock = Clock()
    t = SaveTriggers(TriggerOptions(every_seconds=60.0), clock=clock, start_step=5)
    clock.now += 59
    assert t.due(6) is None
    clock.now += 1
    assert t.due(7) == "seconds"
    t.saved(7)
    assert t.due(8) is None


def test_both_triggers_disabled_only_requests_save():
    clock = Clock()
    t = SaveTriggers(
        TriggerOptions(every_steps=None, every_seconds=None, lifetime_seconds=None),
        clock=clock,
    )
    clock.now += 1e6
    assert t.due(10**6) is None
    t.save_now()
    assert t.due(10**6) == "requested"
    t.saved(10**6)
    assert t.due(10**6 + 1) is None


def test_the_default_lifetime_counts_in_colab_only():
    """Colab's ~12 h limit is the default's reason; a chosen one counts anywhere."""
    from colab_resume.checkpoint.triggers import (
        DEFAULT_LIFETIME_SECONDS,
        lifetime_applies,
    )

    assert lifetime_applies(DEFAULT_LIFETIME_SECONDS, in_colab=True)
    assert not lifetime_applies(DEFAULT_LIFETIME_SECONDS, in_colab=False)
    assert lifetime_applies(3600.0, in_colab=False)
    assert not lifetime_applies(None, in_colab=True)


def test_lifetime_deadline_fires_once():
    clock = Clock(now=50_000.0)
    options = TriggerOptions(
        every_seconds=None, lifetime_seconds=100.0, boot_time=clock.now - 90.0
    )
    t = SaveTriggers(options, clock=clock)
    assert t.due(1) is None
    clock.now += 10
    assert t.due(2) == "lifetime"
    t.saved(2, "lifetime")
    clock.now += 1000
    assert t.due(3) is None


def test_no_deadline_without_boot_time():
    clock = Clock()
    t = SaveTriggers(TriggerOptions(every_seconds=None), clock=clock)
    clock.now += 10**6
    assert t.deadline is None and t.due(1) is None


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"every_steps": 0}, "every_steps"),
        ({"every_steps": 2.5}, "every_steps"),
        ({"every_seconds": -1}, "every_seconds"),
        ({"lifetime_seconds": float("nan")}, "lifetime_seconds"),
        ({"boot_time": "yesterday"}, "boot_time"),
    ],
)
def test_trigger_options_name_the_bad_field(kwargs, field):
    with pytest.raises(ValueError, match=f"TriggerOptions.{field}"):
        TriggerOptions(**kwargs)


# --- retention plan ------------------------------------------------------------


def _dir(step: int, lease: int, committed: bool = True) -> CheckpointDir:
    objects = {"ckpt.index": ObjectInfo("x", 1, 0.0)}
    if committed:
        objects[MANIFEST] = ObjectInfo("m", 1, 0.0)
    return CheckpointDir(name=CheckpointName(step, lease), objects=objects)


def _names(dirs):
    return [(d.name.step, d.name.lease) for d in dirs]


def test_plan_keeps_newest_and_every_nth():
    dirs = [_dir(s, 1) for s in (100, 200, 300, 400, 500)]
    assert _names(plan(dirs, keep=2, keep_every_steps=None, lease=1)) == [
        (100, 1),
        (200, 1),
        (300, 1),
    ]
    assert _names(plan(dirs, keep=2, keep_every_steps=200, lease=1)) == [
        (100, 1),
        (300, 1),
    ]


def test_plan_never_deletes_newest_committed_even_if_uncommitted_are_newer():
    dirs = [_dir(100, 1), _dir(200, 2, committed=False)]
    assert _names(plan(dirs, keep=1, keep_every_steps=None, lease=3)) == [(200, 2)]
    assert plan([_dir(100, 1)], keep=1, keep_every_steps=None, lease=1) == []


def test_plan_spares_in_flight_and_newer_leases():
    dirs = [
        _dir(100, 1),
        _dir(150, 1, committed=False),  # a dead session's leftover
        _dir(200, 2, committed=False),  # ours, in flight
        _dir(300, 3, committed=False),  # a newer session's upload
    ]
    doomed = plan(
        dirs, keep=1, keep_every_steps=None, lease=2, in_flight=CheckpointName(200, 2)
    )
    assert _names(doomed) == [(150, 1)]


def test_plan_ties_order_by_lease():
    dirs = [_dir(100, 1), _dir(100, 2)]
    assert _names(plan(dirs, keep=1, keep_every_steps=None, lease=2)) == [(100, 1)]


# --- manifest ------------------------------------------------------------------


def test_crc32c_matches_gcs_encoding():
    # The CRC32C check value of "123456789" is 0xE3069283.
    assert crc32c_bytes(b"123456789") == "4waSgw=="


def _manifest(**changes):
    value = dict(
        step=5,
        epoch=1,
        lease=2,
        wall_time=1.0,
        files=(FileEntry(name="ckpt.index", size=3, crc32c="AAAAAA=="),),
    )
    value.update(changes)
    return Manifest(**value)


def test_manifest_round_trip_and_untrusted_parse():
    manifest = _manifest(metrics={"loss": 0.5}, extras={"seen": [1, 2]})
    assert Manifest.from_json(manifest.to_json()) == manifest
    broken = manifest.to_json()
    broken["files"][0]["size"] = "big"
    with pytest.raises(CorruptRecordError, match="size"):
        Manifest.from_json(broken)
    with pytest.raises(CorruptRecordError, match="format"):
        Manifest.from_json({"step": 1})


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"step": -1}, "step"),
        ({"files": ()}, "files"),
        ({"extras": {"x": object()}}, "extras"),
    ],
)
def test_manifest_validation_names_field(changes, field):
    with pytest.raises(ValueError, match=f"Manifest.{field}"):
        _manifest(**changes)


# --- progress ------------------------------------------------------------------


def test_progress_is_quiet_for_short_transfers_then_reports_rate_and_eta():
    clock, events = Clock(0.0), EventLog()
    progress = TransferProgress(
        events, kind="t.progress", what="upload", total_bytes=100, step=7, clock=clock
    )
    clock.now = 1.0
    progress.advance(10)
    assert events.recent(kind="t") == []
    clock.now = 4.0
    progress.advance(30)
    (event,) = events.recent(kind="t")
    assert event.step == 7 and event.data["bytes_done"] == 40
    assert event.data["rate_bytes_per_s"] == pytest.approx(10.0)
    assert event.data["eta_s"] == pytest.approx(6.0)
    clock.now = 5.0
    progress.advance(10)  # within every_seconds of the last event
    assert len(events.recent(kind="t")) == 1


def test_a_resume_says_its_epoch_as_keras_prints_it():
    from colab_resume.checkpoint.restore import keras_epoch

    assert keras_epoch(0, 12) == " (the start of epoch 1)"
    assert keras_epoch(24, 12) == " (the start of epoch 3)"  # Keras: "Epoch 3/10"
    assert keras_epoch(30, 12) == " (epoch 3, after 6 of its 12 steps)"
    assert keras_epoch(30, None) == ""  # unknown epoch length: no guess


def test_only_a_multi_process_checkpoint_needs_done_markers():
    from colab_resume.protocol.commit import missing_processes
    from colab_resume.protocol.rundir import process_marker

    assert missing_processes(1, ["ckpt.safetensors", MANIFEST]) == []
    two = ["ckpt.safetensors", process_marker(0), MANIFEST]
    assert missing_processes(2, two) == [1]
    assert missing_processes(2, [*two, process_marker(1)]) == []

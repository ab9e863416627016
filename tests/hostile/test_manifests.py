"""A manifest decides what is restored; a hostile one is damage, never obeyed.

CRC32C proves the listed files arrived intact, not that the manifest is
honest. A ``prefix`` of ``/abs/path`` or ``../..`` made TensorFlow read a
checkpoint from anywhere on the local disk; extras of the wrong type
restored and then broke training; a listed file of any size was
downloaded whole. Each now makes the checkpoint damaged, and restore
falls back to the next older one.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from support.hostile import checkpoint_manager as manager

from colab_resume.checkpoint import restore
from colab_resume.events import EventLog
from colab_resume.protocol.manifest import crc32c_bytes
from colab_resume.protocol.rundir import CheckpointName
from colab_resume.storage import Storage


def state(value: float) -> dict:
    return {"w": tf.Variable(np.full((16, 8), value, dtype="float32"))}


def two_checkpoints(storage, tmp_path) -> str:
    """Steps 1 (w = 1) and 2 (w = 2); returns the path of step 2's manifest."""
    mgr = manager(storage, tmp_path)
    for step in (1, 2):
        mgr.save(state(float(step)), step=step, epoch=0)
        mgr.wait()
        mgr.check()
    mgr.close()
    return CheckpointName(2, 1).manifest_path


def rewrite(storage, path: str, **changes) -> None:
    manifest = storage.read_json(path)
    manifest.update(changes)
    storage.write_bytes(path, json.dumps(manifest).encode())


def restored_value(storage, tmp_path, events) -> tuple[int, float]:
    fresh = state(0.0)
    info = manager(storage, tmp_path, events).restore(fresh)
    return info.step, float(fresh["w"].numpy()[0, 0])


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_prefix_outside_the_download_is_damage(
    where, gcs_run_dir, gcs_options, tmp_path
):
    storage = Storage(gcs_run_dir, gcs_options)
    manifest_path = two_checkpoints(storage, tmp_path)
    # A checkpoint of someone else's choosing, already on the local disk.
    planted = tmp_path / "planted" / "evil"
    tf.train.Checkpoint(**{"w": {"000000": state(666.0)["w"]}}).write(str(planted))
    prefix = str(planted)
    if where == "relative":  # climbs out of the download directory
        prefix = "../" * 12 + str(planted).lstrip("/")
    rewrite(storage, manifest_path, prefix=prefix)

    events = EventLog()
    assert restored_value(storage, tmp_path, events) == (1, 1.0)  # not 666
    [damaged] = events.recent(kind="checkpoint.damaged")
    assert "prefix" in damaged.message and "step-000000002" in damaged.message


@pytest.mark.parametrize(
    "extras",
    [
        {"fingerprints": ["not", "a", "dict"]},
        {"history": {"epoch": "0", "history": {}}},
        {"history": {"epoch": [0], "history": {"loss": "high"}}},
    ],
)
def test_agent_extras_of_the_wrong_type_are_damage(
    extras, gcs_run_dir, gcs_options, tmp_path
):
    storage = Storage(gcs_run_dir, gcs_options)
    rewrite(storage, two_checkpoints(storage, tmp_path), extras=extras)
    events = EventLog()
    assert restored_value(storage, tmp_path, events) == (1, 1.0)
    assert "extras" in events.recent(kind="checkpoint.damaged")[0].message


def test_a_manifest_listing_more_than_the_state_can_hold_is_not_downloaded(
    gcs_run_dir, gcs_options, tmp_path, monkeypatch
):
    storage = Storage(gcs_run_dir, gcs_options)
    manifest_path = two_checkpoints(storage, tmp_path)
    # A real, intact, huge shard: its CRC32C matches, only its size tells.
    monkeypatch.setattr(restore, "SIZE_SLACK_BYTES", 1 << 20)
    huge = os.urandom(3 << 20)
    directory = CheckpointName(2, 1).path
    storage.write_bytes(f"{directory}/ckpt.data-00001-of-00002", huge)
    manifest = storage.read_json(manifest_path)
    manifest["files"].append(
        {
            "name": "ckpt.data-00001-of-00002",
            "size": len(huge),
            "crc32c": crc32c_bytes(huge),
        }
    )
    storage.write_bytes(manifest_path, json.dumps(manifest).encode())

    events = EventLog()
    assert restored_value(storage, tmp_path, events) == (1, 1.0)
    message = events.recent(kind="checkpoint.damaged")[0].message
    assert "more than" in message
    assert not events.recent(kind="checkpoint.download.progress")

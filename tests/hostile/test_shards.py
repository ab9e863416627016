"""A shard that disagrees with its manifest is damage, never a wedged run.

The CRC32C proves a shard arrived as it was committed, not that what was
committed describes the state the manifest lists. Here the newest
checkpoint's shard is rewritten (header edited, the manifest's size and
CRC32C updated to match, so every listing and download check passes) and
restore must fall back to the older checkpoint with a warning, where it
used to raise StructureMismatchError, the error for a model the user
changed, which no older checkpoint can cure. That error stays for a real
change of model.
"""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest
import tensorflow as tf
from support.hostile import checkpoint_manager as manager

from colab_resume.checkpoint import StructureMismatchError
from colab_resume.events import EventLog
from colab_resume.protocol.manifest import crc32c_bytes
from colab_resume.protocol.rundir import CheckpointName
from colab_resume.storage import Storage

TENSOR = "w/000000"  # the one variable: group w, position 0
NEWEST = CheckpointName(2, 1)


def state(value: float, columns: int = 8) -> dict:
    return {"w": tf.Variable(np.full((16, columns), value, dtype="float32"))}


@pytest.fixture
def storage(gcs_run_dir, gcs_options, tmp_path) -> Storage:
    """Steps 1 (w = 1) and 2 (w = 2), committed."""
    storage = Storage(gcs_run_dir, gcs_options)
    mgr = manager(storage, tmp_path)
    for step in (1, 2):
        mgr.save(state(float(step)), step=step, epoch=0)
        mgr.wait()
        mgr.check()
    mgr.close()
    return storage


def split(raw: bytes) -> tuple[dict, bytes]:
    (length,) = struct.unpack_from("<Q", raw)
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def join(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def recommit_shard(storage, edit) -> None:
    """Rewrite step 2's shard with ``edit(header)`` and list it in its manifest."""
    path = f"{NEWEST.path}/ckpt.safetensors"
    header, data = split(storage.read_bytes(path))
    edit(header)
    raw = join(header, data)
    storage.write_bytes(path, raw)
    manifest = storage.read_json(NEWEST.manifest_path)
    [entry] = [f for f in manifest["files"] if f["name"] == "ckpt.safetensors"]
    entry.update(size=len(raw), crc32c=crc32c_bytes(raw))
    storage.write_bytes(NEWEST.manifest_path, json.dumps(manifest).encode())


def restored(storage, tmp_path, events) -> tuple[int, float]:
    fresh = state(0.0)
    info = manager(storage, tmp_path, events).restore(fresh)
    return info.step, float(fresh["w"].numpy()[0, 0])


def set_field(field, value):
    return lambda header: header[TENSOR].__setitem__(field, value)


DAMAGE = {
    "unknown dtype": (set_field("dtype", "F8_E4M3"), "F8_E4M3"),
    "missing tensor": (lambda header: header.pop(TENSOR), "no tensor w/000000"),
    "wrong shape": (set_field("shape", [8, 16]), r"float32\[8, 16\]"),
    "wrong dtype": (set_field("dtype", "I32"), r"int32\[16, 8\]"),
    "zero dimension": (
        lambda header: header[TENSOR].update(shape=[0, 8], data_offsets=[0, 0]),
        r"float32\[0, 8\]",
    ),
    # 2 MiB of valid JSON, for a checkpoint of one tensor.
    "oversized header": (
        lambda header: header.__setitem__("__metadata__", {"pad": "x" * (2 << 20)}),
        "header of",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_shard_disagreeing_with_its_manifest_falls_back(damage, storage, tmp_path):
    edit, reason = DAMAGE[damage]
    recommit_shard(storage, edit)
    events = EventLog()
    assert restored(storage, tmp_path, events) == (1, 1.0)
    [warning] = events.recent(kind="checkpoint.damaged")
    assert warning.level == "warning" and warning.data["checkpoint"] == NEWEST.dirname
    assert re.search(reason, warning.message), warning.message


def test_a_changed_model_still_raises_structure_mismatch(storage, tmp_path):
    events = EventLog()
    with pytest.raises(StructureMismatchError, match=r"\[16, 8\].*\[16, 9\]"):
        manager(storage, tmp_path, events).restore(state(0.0, columns=9))
    assert not events.recent(kind="checkpoint.damaged")


def test_a_shard_changed_after_its_download_check_is_not_restored(
    storage, tmp_path, monkeypatch
):
    """The file changes on the local disk between its CRC32C check and its read.

    The change is made by wrapping ``Storage.get_file_checked``
    (monkeypatched, the step between the two): its CRC32C was computed as the
    bytes streamed in, so that check passes, and the wrapper then flips a bit
    of w[0, 0] in the downloaded file before the reader opens it. A mapped
    read restored that unverified value.
    """
    original = Storage.get_file_checked
    shards = []

    def download_then_change(self, rel, local_path):
        arrived = original(self, rel, local_path)
        if local_path.endswith("ckpt.safetensors"):
            shards.append(rel)
            if len(shards) == 1:  # the newest checkpoint is tried first
                raw = bytearray(open(local_path, "rb").read())
                (length,) = struct.unpack_from("<Q", raw)
                raw[8 + length + 3] ^= 0x40  # w[0, 0]'s exponent byte
                open(local_path, "wb").write(bytes(raw))
        return arrived

    monkeypatch.setattr(Storage, "get_file_checked", download_then_change)
    events = EventLog()
    assert restored(storage, tmp_path, events) == (1, 1.0)
    [warning] = events.recent(kind="checkpoint.damaged")
    assert "changed after its download was checked" in warning.message
    assert len(shards) == 2  # and the older checkpoint was downloaded

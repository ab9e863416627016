"""A local checkpoint is on the disk before it counts as committed.

A real save through ``CheckpointManager`` into a local run directory, with
``os.fsync`` and ``os.link`` recorded in this process (each still does its
real work). Recording the calls stands in for a power cut, which cannot be
simulated here: a killed process loses nothing the kernel holds, so only
the order of the syncs shows that a machine losing power after the commit
would keep the checkpoint. The order the protocol needs: every shard's
data, then the directories naming it, then the manifest's data, its link
(the commit), and last the directory naming the manifest.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from colab_resume.checkpoint import CheckpointManager
from colab_resume.events import EventLog
from colab_resume.protocol.rundir import MANIFEST, CheckpointName
from colab_resume.storage import Storage


@pytest.fixture
def recorded(monkeypatch):
    """Every fsync (the path synced) and link (the path made), in order."""
    calls: list[tuple[str, str]] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def link(source: str, target: str, *args: object, **kwargs: object) -> None:
        real_link(source, target, *args, **kwargs)  # type: ignore[arg-type]
        calls.append(("link", os.path.abspath(target)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    return calls


def test_shards_then_manifest_then_directory_are_synced(tmp_path, recorded):
    run_dir = tmp_path / "run"
    manager = CheckpointManager(
        Storage(str(run_dir)),
        lease=1,
        fence=lambda: None,
        events=EventLog(),
        staging_dir=str(tmp_path / "staging"),
    )
    state = {"w": tf.Variable(np.arange(4096, dtype="float32"))}
    manager.save(state, step=3, epoch=0, metrics={})
    manager.wait()
    manager.check()

    folder = str(run_dir / CheckpointName(3, 1).path)
    manifest = os.path.join(folder, MANIFEST)
    shards = [
        os.path.join(folder, name)
        for name in os.listdir(folder)
        if name != MANIFEST and not name.startswith("PROCESS-")
    ]
    assert shards, os.listdir(folder)
    committed = recorded.index(("link", manifest))
    before, after = recorded[:committed], recorded[committed + 1 :]
    synced = [path for kind, path in before if kind == "fsync"]
    for shard in shards:
        assert shard in synced, (shard, recorded)
    last_shard = max(synced.index(shard) for shard in shards)
    # The checkpoint's folder and the folder naming it, after the shards...
    assert folder in synced[last_shard:], recorded
    assert str(run_dir / "checkpoints") in synced, recorded
    # ...then the manifest's data (its temporary file, linked next)...
    manifest_data = [p for p in synced[last_shard:] if "/.tmp-" in p]
    assert manifest_data and manifest_data[-1].startswith(folder + "/"), recorded
    assert synced.index(manifest_data[-1]) > synced.index(folder, last_shard)
    # ...and once linked, the folder whose entry now names it.
    assert ("fsync", folder) in after, recorded

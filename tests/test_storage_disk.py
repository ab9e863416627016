"""A local run directory whose disk refuses: one line each, with the fix.

Real file systems where this machine can make them: a small tmpfs (full
disk) and a tmpfs remounted read-only, mounted for the test (root only;
elsewhere these tests are skipped, saying why). A file system without
hard links cannot be mounted here (no FUSE, no FAT tools), so that test
injects the error ``os.link`` gives on one at its single call site.
"""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from colab_resume.errors import (
    NoHardLinksError,
    PermissionDeniedError,
    ReadOnlyStorageError,
    StorageFullError,
)
from colab_resume.storage import Storage
from colab_resume.storage import store as store_module


@pytest.fixture
def small_disk(tmp_path):
    """Mount a 1 MB tmpfs; yield its path and a function remounting it read-only."""
    path = tmp_path / "disk"
    path.mkdir()

    def mount(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["mount", *args], capture_output=True, text=True, check=False
        )

    mounted = mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path))
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root here: {mounted.stderr.strip()}")

    def read_only() -> None:
        assert mount("-o", "remount,ro", str(path)).returncode == 0

    try:
        yield path, read_only
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and "gs://None" not in text, text
    return text


def test_a_full_disk_names_the_space_and_the_fix(small_disk, tmp_path):
    disk, _ = small_disk
    big = tmp_path / "shard"
    big.write_bytes(os.urandom(2_000_000))
    storage = Storage(str(disk / "run"))
    with pytest.raises(StorageFullError) as raised:
        storage.put_file(str(big), "checkpoints/step-000000005.e00000001/ckpt.data")
    text = one_line(raised.value)
    assert "Disk full: cannot upload checkpoints/" in text
    assert " MB free" in text and "lower keep=" in text


def test_a_read_only_disk_names_the_fix(small_disk):
    disk, read_only = small_disk
    (disk / "run").mkdir()
    read_only()
    storage = Storage(str(disk / "run"))
    with pytest.raises(ReadOnlyStorageError) as raised:
        storage.write_json("lease/00000001.json", {"lease": 1}, create_only=True)
    text = one_line(raised.value)
    assert "read-only file system" in text and "writable directory" in text


def test_a_file_system_without_hard_links_is_named_at_the_first_create(
    tmp_path, monkeypatch
):
    """Injected: such a mount (a FUSE one) gives EIO from ``link()``."""

    def no_links(source: str, target: str) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(store_module.os, "link", no_links)
    storage = Storage(str(tmp_path / "run"))
    storage.write_json("heartbeat/00000001.json", {"beat": 1})  # no link: fine
    with pytest.raises(NoHardLinksError) as raised:
        storage.write_json("lease/00000001.json", {"lease": 1}, create_only=True)
    text = one_line(raised.value)
    assert "does not make hard links" in text and "gs:// bucket" in text
    assert os.listdir(tmp_path / "run" / "lease") == []  # no temporary file left


def test_a_local_permission_error_names_no_bucket(tmp_path, monkeypatch):
    """Injected: as root (these tests' user) chmod does not stop a write."""

    def refuse(source: str, target: str) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), target)

    monkeypatch.setattr(store_module.os, "replace", refuse)
    with pytest.raises(PermissionDeniedError) as raised:
        Storage(str(tmp_path / "run")).write_json("heartbeat/00000001.json", {})
    text = one_line(raised.value)
    assert "chown" in text and str(tmp_path / "run") in text


def test_a_rerun_after_a_full_disk_first_clears_the_dead_upload(small_disk, tmp_path):
    """The dead session's uncommitted files would leave no room for the next
    session's first checkpoint; retention ran only after a commit."""
    import numpy as np
    import tensorflow as tf

    from colab_resume.checkpoint import CheckpointManager
    from colab_resume.events import EventLog
    from colab_resume.protocol.rundir import CheckpointName

    disk, _ = small_disk
    storage = Storage(str(disk / "run"))
    dead = CheckpointName(step=5, lease=1)
    leftover = tmp_path / "leftover"
    leftover.write_bytes(os.urandom(600_000))
    storage.put_file(str(leftover), f"{dead.path}/ckpt.data-00000-of-00001")

    events = EventLog()
    manager = CheckpointManager(
        storage,
        lease=2,
        fence=lambda: None,
        events=events,
        staging_dir=str(tmp_path / "staging"),
    )
    weights = np.random.default_rng(0).standard_normal((4700, 32)).astype("float32")
    state = {"w": tf.Variable(weights)}  # 600 KB: both do not fit in 1 MB
    manager.save(state, step=10, epoch=0)
    manager.close()  # raises the upload's error, if any
    assert manager.committed() == [CheckpointName(step=10, lease=2)]
    assert not storage.list(dead.path)
    [pruned] = events.recent(kind="checkpoint.pruned")
    assert dead.dirname in pruned.message

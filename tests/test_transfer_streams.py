"""How many of a checkpoint's files move at once: as many as suit the store.

Each kind of store says how many transfers suit it (``transfer_streams``:
16 on Cloud Storage, 8 on Drive, 4 on a local disk); a checkpoint manager
uses that unless the user set ``workers``. Real local run directories and
the real upload (``checkpoint/transfer.py``): the files in flight are
counted as they move.
"""

from __future__ import annotations

import os
import threading

import pytest
from support.hostile import checkpoint_manager

from colab_resume.checkpoint import transfer
from colab_resume.checkpoint.manager import CheckpointConfig
from colab_resume.storage import Storage
from colab_resume.storage.drive import DriveStore
from colab_resume.storage.gcs import GcsStore
from colab_resume.storage.local import LocalStore


class InFlight:
    """Counts the uploads running at once. Each waits until ``wanted`` run
    together (or none is left to start), so the peak is reached, not hoped
    for; then a moment more, so a pool wider than ``wanted`` shows above it."""

    def __init__(self, wanted: int, files: int) -> None:
        self.lock = threading.Condition()
        self.now = self.peak = self.started = 0
        self.wanted, self.files = wanted, files

    def wrap(self, put):  # type: ignore[no-untyped-def]
        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            with self.lock:
                self.now += 1
                self.started += 1
                self.peak = max(self.peak, self.now)
                self.lock.notify_all()
                left = self.files - self.started
                self.lock.wait_for(
                    lambda: self.now >= self.wanted or self.started == self.files,
                    timeout=30,
                )
                if left:  # a moment for one too many to show (none should)
                    self.lock.wait_for(lambda: self.now > self.wanted, timeout=0.5)
            try:
                return put(*args, **kwargs)
            finally:
                with self.lock:
                    self.now -= 1

        return counted


def test_the_stores_say_how_many_transfers_suit_them() -> None:
    assert GcsStore.transfer_streams > DriveStore.transfer_streams
    assert DriveStore.transfer_streams > LocalStore.transfer_streams >= 2


def test_a_save_moves_as_many_files_at_once_as_its_store_suits(tmp_path) -> None:
    storage = Storage(str(tmp_path / "run"))
    with checkpoint_manager(storage, tmp_path) as manager:
        assert manager.workers == LocalStore.transfer_streams
    files = 3 * manager.workers
    local = tmp_path / "files"
    local.mkdir()
    pairs = []
    for i in range(files):
        path = local / f"ckpt.{i:05d}.bin"
        path.write_bytes(os.urandom(1024))
        pairs.append((str(path), f"checkpoints/step-000000001.e00000001/{path.name}"))
    flight = InFlight(manager.workers, files)
    storage.put_file = flight.wrap(storage.put_file)  # type: ignore[method-assign]
    transfer.upload(storage, pairs, workers=manager.workers)
    assert flight.peak == manager.workers  # all it may, never one more
    assert len(os.listdir(tmp_path / "run/checkpoints/step-000000001.e00000001")) == (
        files
    )


def test_workers_the_user_set_win(tmp_path) -> None:
    storage = Storage(str(tmp_path / "run"))
    with checkpoint_manager(storage, tmp_path, workers=2) as manager:
        assert manager.workers == 2
    with pytest.raises(ValueError, match="workers must be an int >= 1 or None"):
        CheckpointConfig(workers=0)

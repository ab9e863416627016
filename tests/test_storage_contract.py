"""Every store keeps the contract of ``colab_resume/storage/store_contract.py``.

The same primitive checks run against the local store (a real temporary
directory), memory://, the GCS emulator and the Drive emulator, store by store,
below the retries of ``Storage``.
"""

from __future__ import annotations

import base64
import os
import tempfile
import threading
import time

import google_crc32c
import pytest

from colab_resume.storage import Storage, split_url
from colab_resume.storage.local import LocalStore
from colab_resume.storage.store_contract import ObjectInfo, Store
from colab_resume.storage.stores import store_class


def crc32c_b64(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def open_store(url: str, options: dict | None = None) -> Store:
    protocol, root = split_url(url)
    return store_class(protocol)(url, protocol, root, dict(options or {}))


@pytest.fixture(params=["local", "memory", "gs", "gdrive"])
def store(request, tmp_path) -> Store:
    """One run directory on each kind of store the product has."""
    if request.param == "gdrive":
        return open_store(
            request.getfixturevalue("drive_run_dir"),
            request.getfixturevalue("drive_options"),
        )
    if request.param == "gs":
        return open_store(
            request.getfixturevalue("gcs_run_dir"),
            request.getfixturevalue("gcs_options"),
        )
    if request.param == "local":
        return open_store(str(tmp_path / "runs" / "r"))
    return open_store(f"memory://{request.node.name}/runs/r")


def test_a_file_its_writer_drops_arrives_whole(store: Store, tmp_path) -> None:
    """``move_file``: every store ends with the bytes; a local run directory
    on the same disk takes the file itself (a rename, no second write)."""
    payload = bytes(range(256)) * 4096
    source = tmp_path / "staging.bin"
    source.write_bytes(payload)
    inode = source.stat().st_ino
    store.move_file(str(source), "checkpoints/m/ckpt.data")
    copy = tmp_path / "back.bin"
    store.get_file("checkpoints/m/ckpt.data", str(copy))
    assert copy.read_bytes() == payload
    if isinstance(store, LocalStore):
        assert not source.exists()
        assert os.stat(store.path("checkpoints/m/ckpt.data")).st_ino == inode


def test_a_local_run_directory_on_another_disk_gets_a_copy(tmp_path) -> None:
    """Staging on one file system and the run directory on another (a
    tmpfs and the disk here, both real): the rename cannot cross, a copy
    does."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system here")
    store = open_store(str(tmp_path / "runs" / "r"))
    with tempfile.NamedTemporaryFile(dir=shm, delete=False) as handle:
        handle.write(b"shard" * 1000)
    try:
        store.move_file(handle.name, "checkpoints/x/ckpt.data")
        assert store.read("checkpoints/x/ckpt.data") == b"shard" * 1000
    finally:
        os.unlink(handle.name)  # a copy leaves it: the caller drops it


def test_missing_objects_read_as_missing(store: Store) -> None:
    assert store.exists("run.json") is False
    with pytest.raises(FileNotFoundError):
        store.read("run.json")
    with pytest.raises(FileNotFoundError):
        store.info("run.json")
    assert store.list("") == []
    assert store.list("no/such/prefix") == []
    store.delete("run.json")  # already gone: not an error


def test_write_replaces_whole_and_info_describes_it(store: Store) -> None:
    before = store.server_time()
    store.write("lease/1.json", b"first", create_only=False, write_id="a")
    store.write("lease/1.json", b"second!", create_only=False, write_id="b")
    assert store.exists("lease/1.json") is True
    assert store.exists("lease") is False  # a "directory" is not an object
    assert store.read("lease/1.json") == b"second!"
    info = store.info("lease/1.json")
    assert (info.path, info.size) == ("lease/1.json", 7)
    assert info.crc32c in (None, crc32c_b64(b"second!"))
    # updated is on the clock of server_time (GCS's Date has 1 s steps).
    assert before - 1 <= info.updated <= store.server_time() + 1


def test_create_only_fails_on_an_existing_object_and_keeps_it(store: Store) -> None:
    store.write("lease/2.json", b"mine", create_only=True, write_id="first")
    with pytest.raises(FileExistsError):
        store.write("lease/2.json", b"theirs", create_only=True, write_id="second")
    assert store.read("lease/2.json") == b"mine"
    assert store.written_by("lease/2.json", "second") is False


def test_create_only_between_threads_has_exactly_one_winner(store: Store) -> None:
    """The lease race, on the store itself: of eight creates one wins."""
    barrier = threading.Barrier(8)
    won: list[int] = []
    lost: list[int] = []

    def create(n: int) -> None:
        barrier.wait()
        try:
            store.write("lease/3.json", b"%d" % n, create_only=True, write_id=str(n))
            won.append(n)
        except FileExistsError:
            lost.append(n)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(lost) == 7
    assert store.read("lease/3.json") == b"%d" % won[0]


def test_bounded_read_reads_one_byte_past_the_bound(store: Store) -> None:
    store.write("big.json", b"x" * 100, create_only=False, write_id="a")
    store.write("empty.json", b"", create_only=False, write_id="b")
    assert store.read("big.json", max_bytes=10) == b"x" * 11
    assert store.read("big.json", max_bytes=1000) == b"x" * 100
    assert store.read("empty.json", max_bytes=10) == b""  # GCS: 416, not an error


def test_list_is_recursive_relative_and_objects_only(store: Store) -> None:
    for rel in ("checkpoints/a/ckpt.index", "checkpoints/a/b/data", "history/1"):
        store.write(rel, rel.encode(), create_only=False, write_id=rel)
    found = sorted(store.list("checkpoints"), key=lambda item: item.path)
    assert [item.path for item in found] == [
        "checkpoints/a/b/data",
        "checkpoints/a/ckpt.index",
    ]
    assert all(isinstance(item, ObjectInfo) for item in found)
    assert found[0].size == len(b"checkpoints/a/b/data")
    assert {item.path for item in store.list("")} == {
        "checkpoints/a/ckpt.index",
        "checkpoints/a/b/data",
        "history/1",
    }


@pytest.mark.parametrize(
    "size",
    [256 * 5000, 6 << 20],
    ids=["over one 1 MiB read", "streamed on GCS"],
)
def test_files_travel_whole_and_checked(store: Store, tmp_path, size: int) -> None:
    payload = (bytes(range(256)) * (size // 256 + 1))[:size]
    source = tmp_path / "upload.bin"
    source.write_bytes(payload)
    store.put_file(str(source), "checkpoints/s/ckpt.data")
    plain, checked = tmp_path / "plain.bin", tmp_path / "checked.bin"
    store.get_file("checkpoints/s/ckpt.data", str(plain))
    assert plain.read_bytes() == payload
    size, crc = store.get_file_checked("checkpoints/s/ckpt.data", str(checked))
    assert (size, crc) == (len(payload), crc32c_b64(payload))
    assert checked.read_bytes() == payload
    with pytest.raises(FileNotFoundError):
        store.get_file_checked("checkpoints/s/missing", str(tmp_path / "none"))
    store.delete("checkpoints/s/ckpt.data")
    assert store.exists("checkpoints/s/ckpt.data") is False
    assert store.leftovers("checkpoints") == []  # writes that ended leave none
    store.remove_leftovers("checkpoints/s")
    assert store.list("") == []


def test_check_and_server_time_answer(store: Store) -> None:
    store.check()
    assert abs(store.server_time() - time.time()) < 60  # all on this machine


def test_storage_holds_its_store_and_asks_it_everything(tmp_path) -> None:
    """Storage names no protocol: its root and principal are its store's."""
    storage = Storage(str(tmp_path / "run"))
    assert isinstance(storage.store, Store)
    assert storage.root == storage.store.root == str(tmp_path / "run")
    assert storage.principal == storage.store.principal

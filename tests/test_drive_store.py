"""The Drive store under races, lost answers, planted duplicates and faults.

Against the Drive API emulator (google-drive-mock with the upload routes
tests/drive_mock/server.js adds), through tests/support/faultproxy.py where a
fault must happen on the wire. Each "session" is a store of its own (its
own caches and connection), as two machines would be.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request

import pytest
from support.faultproxy import FaultMix, FaultProxy, path_contains

from colab_resume.errors import (
    PermissionDeniedError,
    StorageFullError,
    StorageUnavailableError,
)
from colab_resume.retry import RetryPolicy
from colab_resume.storage import Storage, split_url
from colab_resume.storage.drive import DriveStore
from colab_resume.storage.drive_api import FOLDER_MIME
from colab_resume.storage.drive_index import INDEX_NAME

FAST = RetryPolicy(total_seconds=20.0, initial_seconds=0.01, max_seconds=0.05)


def open_store(url: str, options: dict) -> DriveStore:
    protocol, root = split_url(url)
    return DriveStore(url, protocol, root, dict(options))


def all_files(store: DriveStore) -> list[dict]:
    """Every file in the run folder, as Drive lists it (index or not)."""
    folder = store._run_folder(create=False, timeout=10)
    assert folder is not None
    return store.api.children(
        f"'{folder}' in parents and trashed = false", "id,name", timeout=10
    )


def files_named(store: DriveStore, name: str) -> list[dict]:
    """Every file of that name in the run folder."""
    return [raw for raw in all_files(store) if raw["name"] == name]


@pytest.fixture
def proxy(drive_emulator):
    with FaultProxy(drive_emulator.url) as faulty:
        yield faulty


def test_concurrent_creates_from_separate_sessions_have_one_winner(
    drive_run_dir, drive_options
) -> None:
    """Six sessions (each its own store) create one lease at once: one wins.

    The run folder does not exist yet either: the same start also races
    six creators of the folder and of its index.
    """
    stores = [open_store(drive_run_dir, drive_options) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    won: list[int] = []
    lost: list[int] = []

    def create(n: int) -> None:
        barrier.wait()
        try:
            stores[n].write(
                "lease/1.json", b"%d" % n, create_only=True, write_id=str(n)
            )
            won.append(n)
        except FileExistsError:
            lost.append(n)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(lost) == 5, (won, lost)
    reader = open_store(drive_run_dir, drive_options)
    assert reader.read("lease/1.json") == b"%d" % won[0]
    assert all(
        s._run_folder(create=False, timeout=10)
        == reader._run_folder(create=False, timeout=10)
        for s in stores
    )
    # The losers deleted their uploads: one file of that name remains.
    assert len(files_named(reader, "lease/1.json")) == 1
    assert len(files_named(reader, INDEX_NAME)) == 1


@pytest.mark.parametrize(
    "where",
    [("POST", "/upload/drive/v3/files"), ("PUT", "/upload/drive/v2/files/")],
    ids=["upload-answer-lost", "index-update-answer-lost"],
)
def test_a_create_whose_answer_was_lost_is_retried_into_one_object(
    drive_run_dir, drive_options, proxy, where
) -> None:
    """The server acted, the answer was cut off: the retry finds its own work."""
    method, path = where
    options = {**drive_options, "endpoint_url": proxy.url}
    storage = Storage(drive_run_dir, options, retry=FAST)
    storage.write_bytes("history/0.json", b"{}")  # the run folder exists
    proxy.set_mix(
        FaultMix(truncate_rate=1.0, match=path_contains(path, method), max_faults=1)
    )
    storage.write_bytes("lease/1.json", b'{"n": 1}', create_only=True)
    assert proxy.counts["truncate"] == 1
    assert storage.read_bytes("lease/1.json") == b'{"n": 1}'
    assert len(files_named(storage.store, "lease/1.json")) == 1  # type: ignore[arg-type]
    other = Storage(drive_run_dir, drive_options, retry=FAST)
    with pytest.raises(FileExistsError):
        other.write_bytes("lease/1.json", b"{}", create_only=True)


def test_duplicate_names_planted_by_hand_never_confuse_a_reader(
    drive_run_dir, drive_options
) -> None:
    """Files, an index and a whole run folder of the same names, made later."""
    store = open_store(drive_run_dir, drive_options)
    store.write("lease/1.json", b"the real one", create_only=True, write_id="a")
    folder = store._run_folder(create=False, timeout=10)
    assert folder is not None
    api = store.api
    api.create(
        {"name": "lease/1.json", "parents": [folder]}, b"planted", None, timeout=10
    )
    api.create(
        {"name": INDEX_NAME, "parents": [folder]}, b'{"files": {}}', None, timeout=10
    )
    parent = api.get(folder, "parents", timeout=10)["parents"][0]
    twin = api.create_folder("test", parent, timeout=10)
    api.create(
        {"name": INDEX_NAME, "parents": [twin]}, b'{"files": {}}', None, timeout=10
    )
    assert len(files_named(store, "lease/1.json")) == 2

    reader = open_store(drive_run_dir, drive_options)
    assert reader._run_folder(create=False, timeout=10) == folder
    assert reader.read("lease/1.json") == b"the real one"
    assert [item.path for item in reader.list("")] == ["lease/1.json"]
    with pytest.raises(FileExistsError):
        reader.write("lease/1.json", b"x", create_only=True, write_id="b")
    reader.delete("lease/1.json")
    assert reader.exists("lease/1.json") is False
    assert reader.list("") == []


def corrupt_uploads(drive_emulator, count: int) -> None:
    request = urllib.request.Request(
        f"{drive_emulator.url}/debug/corrupt-uploads?count={count}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


@pytest.mark.parametrize("size", [1000, 6 << 20], ids=["multipart", "resumable"])
def test_an_upload_damaged_in_transit_is_sent_again(
    drive_run_dir, drive_options, drive_emulator, tmp_path, size
) -> None:
    storage = Storage(drive_run_dir, drive_options, retry=FAST)
    storage.write_bytes("history/0.json", b"{}")
    payload = bytes(range(256)) * (size // 256)
    source = tmp_path / "shard"
    source.write_bytes(payload)
    retried: list[str] = []
    storage.on_retry = lambda op, n, exc, delay: retried.append(type(exc).__name__)
    corrupt_uploads(drive_emulator, 1)
    storage.put_file(str(source), "checkpoints/1/shard")
    assert retried == ["UploadChecksumError"]
    storage.get_file("checkpoints/1/shard", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == payload
    assert len(files_named(storage.store, "checkpoints/1/shard")) == 1  # type: ignore[arg-type]


def test_bytes_that_never_arrive_intact_are_never_an_object(
    drive_run_dir, drive_options, drive_emulator
) -> None:
    """Every try damaged: a clear error, and no object (nothing to restore)."""
    storage = Storage(
        drive_run_dir,
        drive_options,
        retry=RetryPolicy(
            total_seconds=20.0, initial_seconds=0.01, max_seconds=0.02, max_attempts=4
        ),
    )
    storage.write_bytes("history/0.json", b"{}")
    corrupt_uploads(drive_emulator, 10_000)
    try:
        with pytest.raises(StorageUnavailableError, match="did not arrive intact"):
            storage.write_bytes(
                "checkpoints/1/manifest.json", b'{"step": 1}', create_only=True
            )
    finally:
        corrupt_uploads(drive_emulator, 0)
    assert storage.exists("checkpoints/1/manifest.json") is False
    assert [item.path for item in storage.list("")] == ["history/0.json"]
    assert files_named(storage.store, "checkpoints/1/manifest.json") == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "mix",
    [
        FaultMix(error_rate=0.15, statuses=(500, 502, 503), seed=3),
        FaultMix(error_rate=0.15, statuses=(429,), seed=3),
        FaultMix(
            error_rate=0.15, statuses=(403,), error_reason="userRateLimitExceeded"
        ),
        FaultMix(error_rate=0.15, statuses=(403,), error_reason="rateLimitExceeded"),
        FaultMix(reset_rate=0.1, seed=5),
        FaultMix(truncate_rate=0.1, seed=7),
    ],
    ids=["5xx", "429", "403-user-rate-limit", "403-rate-limit", "reset", "truncated"],
)
def test_server_errors_rate_limits_and_broken_connections_are_retried(
    drive_run_dir, drive_options, proxy, tmp_path, mix
) -> None:
    """Every primitive under faults on the wire still does exactly its work."""
    storage = Storage(
        drive_run_dir, {**drive_options, "endpoint_url": proxy.url}, retry=FAST
    )
    proxy.set_mix(mix)
    storage.write_bytes("lease/1.json", b"1", create_only=True)
    storage.write_bytes("heartbeat/1.json", b"beat")
    storage.write_bytes("heartbeat/1.json", b"beat 2")
    source = tmp_path / "f"
    source.write_bytes(b"x" * 5000)
    storage.put_file(str(source), "checkpoints/1/data")
    assert storage.read_bytes("heartbeat/1.json") == b"beat 2"
    assert sorted(item.path for item in storage.list("")) == [
        "checkpoints/1/data",
        "heartbeat/1.json",
        "lease/1.json",
    ]
    storage.delete("checkpoints/1/data")
    assert storage.exists("checkpoints/1/data") is False
    assert proxy.faults() >= 3
    # No file left behind by a retried step (an upload, a delete).
    proxy.set_mix(FaultMix())
    names = sorted(raw["name"] for raw in all_files(storage.store))  # type: ignore[arg-type]
    assert names == [INDEX_NAME, "heartbeat/1.json", "lease/1.json"]


@pytest.mark.parametrize(
    "reason, error, words",
    [
        ("storageQuotaExceeded", StorageFullError, "is full"),
        ("uploadLimitExceeded", StorageFullError, "750 GB per user per day"),
        ("insufficientFilePermissions", PermissionDeniedError, "Share the folder"),
    ],
)
def test_quota_and_permission_refusals_fail_at_once_with_the_fix(
    drive_run_dir, drive_options, proxy, reason, error, words
) -> None:
    storage = Storage(
        drive_run_dir, {**drive_options, "endpoint_url": proxy.url}, retry=FAST
    )
    storage.write_bytes("history/0.json", b"{}")
    proxy.set_mix(
        FaultMix(
            error_rate=1.0,
            statuses=(403,),
            error_reason=reason,
            match=path_contains("/upload/"),
        )
    )
    with pytest.raises(error, match=words):
        storage.write_bytes("heartbeat/1.json", b"beat")
    assert proxy.faults() == 1  # not retried


def test_a_reader_of_a_missing_run_directory_creates_nothing(
    drive_run_dir, drive_options
) -> None:
    reader = open_store(drive_run_dir, drive_options)
    assert reader.list("") == []
    assert reader.exists("run.json") is False
    with pytest.raises(FileNotFoundError):
        reader.read("run.json")
    protocol, root = split_url(drive_run_dir)
    top = root.split("/")[0]
    found = reader.api.children(
        f"name = '{top}' and mimeType = '{FOLDER_MIME}'", "id", timeout=10
    )
    assert found == []


def test_url_forms(drive_options) -> None:
    assert split_url("gdrive://runs/mnist") == ("gdrive", "runs/mnist")
    store = open_store("gdrive://id:ABC123/runs/mnist", drive_options)
    assert (store.base, store.segments) == ("ABC123", ["runs", "mnist"])
    store = open_store("gdrive://runs/mnist", drive_options)
    assert (store.base, store.segments) == ("root", ["runs", "mnist"])
    with pytest.raises(ValueError, match="names no folder"):
        split_url("gdrive://")
    assert json.loads(b'{"files": {}}') == {"files": {}}


def test_a_token_the_server_refuses_is_refreshed_and_never_shown(
    drive_run_dir, drive_emulator, proxy, caplog
) -> None:
    """401 on a token the client still thinks good: refreshed, then retried."""
    from support.fake_credentials import ExpiringCredentials

    credentials = ExpiringCredentials()
    # The first token issued is refused, as a revoked one would be.
    proxy.require_tokens(
        lambda header: (
            bool(credentials.issued) and header != f"Bearer {credentials.issued[0]}"
        )
    )
    caplog.set_level(logging.DEBUG)
    storage = Storage(
        drive_run_dir, {"token": credentials, "endpoint_url": proxy.url}, retry=FAST
    )
    storage.write_bytes("lease/1.json", b"{}", create_only=True)
    assert storage.read_bytes("lease/1.json") == b"{}"
    assert proxy.counts["unauthorized"] >= 1
    assert credentials.refreshes >= 2
    assert not any(token in caplog.text for token in credentials.issued)


def test_a_manifest_claimed_after_the_next_lease_is_late_even_untouched(
    drive_run_dir, drive_options
) -> None:
    """The commit rule's race on Drive, made to happen: lease 1's manifest
    is uploaded, lease 2 is taken, then the manifest is named in the index,
    and its writer dies before the touch that stamps it. Its file still
    carries the upload time, older than lease 2; judged by that, the fenced
    holder's checkpoint would count as committed beside lease 2's own. It
    must be judged late, from the bounds the store reports."""
    from colab_resume.protocol import commit
    from colab_resume.storage import ObjectInfo

    manifest = "checkpoints/step-000000010.e00000001/MANIFEST.json"
    holder = open_store(drive_run_dir, drive_options)
    holder.write("lease/00000001.json", b"{}", create_only=True, write_id="l1")
    taker = open_store(drive_run_dir, drive_options)
    claim = holder.folder.update

    def lease_2_first(change, timeout):  # between the upload and the claim
        taker.write("lease/00000002.json", b"{}", create_only=True, write_id="l2")
        return claim(change, timeout)

    def dies(file_id, *, timeout):
        raise RuntimeError("the holder's VM is gone")

    holder.folder.update = lease_2_first  # type: ignore[method-assign]
    holder.api.touch = dies  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        holder.write(manifest, b"{}", create_only=True, write_id="m")

    reader = open_store(drive_run_dir, drive_options)
    listed = {info.path: info for info in reader.list("")}
    lease_2, late = listed["lease/00000002.json"], listed[manifest]
    assert isinstance(late, ObjectInfo) and late.visible_since < lease_2.updated
    assert commit.judge(late, lease_2.visible_since) == commit.FENCED
    assert commit.judge(reader.info(manifest), lease_2.visible_since) == commit.FENCED

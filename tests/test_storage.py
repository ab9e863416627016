"""The storage layer against the GCS emulator (and local/memory where generic).

Faults are real HTTP faults from ``support.faultproxy`` between gcsfs and the
emulator; every fault test asserts the proxy really injected something.
"""

from __future__ import annotations

import base64
import os
import sys
import textwrap
import threading
import time

import google_crc32c
import pytest
from support import Process
from support.faultproxy import FaultMix, FaultProxy, path_contains
from support.faultproxy import fault_proxy as fault_proxy  # the fixture
from support.processes import python_path
from support.starting import start_together

import colab_resume as cr
from colab_resume.errors import (
    BucketNotFoundError,
    CorruptRecordError,
    NoCredentialsError,
    PermissionDeniedError,
    StorageUnavailableError,
    UnsupportedURLError,
)
from colab_resume.storage import RetryPolicy, Storage, auth

# Short budgets keep fault tests fast; requests_timeout bounds a stall.
FAST = RetryPolicy(total_seconds=15, initial_seconds=0.05, max_seconds=0.5)
REAL_TIME = time.time  # kept before any test patches time.time


def gcs(url: str, endpoint: str, *, retry: RetryPolicy = FAST, **hooks) -> Storage:
    options = {"token": "anon", "endpoint_url": endpoint, "requests_timeout": 2}
    return Storage(url, options, retry=retry, **hooks)


@pytest.fixture(params=["gs", "local", "memory"])
def any_storage(request, tmp_path) -> Storage:
    """The same run directory API on each backend the product supports."""
    if request.param == "gs":
        emulator = request.getfixturevalue("emulator")
        bucket = request.getfixturevalue("bucket")
        return gcs(f"gs://{bucket}/runs/r", emulator.url)
    if request.param == "local":
        return Storage(str(tmp_path / "runs" / "r"))
    return Storage(f"memory://{request.node.name}/runs/r")


@pytest.fixture
def through_proxy(fault_proxy: FaultProxy, bucket: str) -> Storage:
    """A gs:// run directory whose every request goes through the proxy."""
    return gcs(f"gs://{bucket}/runs/r", fault_proxy.url)


def crc32c_b64(data: bytes) -> str:
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


# --- create-only and overwrite ------------------------------------------------


def test_create_only_refuses_a_second_create(any_storage: Storage) -> None:
    """Create-only is exclusive on every backend; overwrite replaces."""
    any_storage.write_json("lease/1.json", {"session": "a"}, create_only=True)
    with pytest.raises(FileExistsError):
        any_storage.write_json("lease/1.json", {"session": "b"}, create_only=True)
    assert any_storage.read_json("lease/1.json") == {"session": "a"}

    any_storage.write_json("lease/1.json", {"session": "c", "n": [1, 2]})
    assert any_storage.read_json("lease/1.json") == {"session": "c", "n": [1, 2]}
    assert any_storage.exists("lease/1.json")
    any_storage.delete("lease/1.json")
    any_storage.delete("lease/1.json")  # already gone: not an error
    assert not any_storage.exists("lease/1.json")


@pytest.fixture(params=["gs", "local"])
def shared_dir(request, tmp_path) -> tuple[str, dict]:
    """(url, storage_options) of a run directory several writers can share."""
    if request.param == "gs":
        emulator = request.getfixturevalue("emulator")
        bucket = request.getfixturevalue("bucket")
        return f"gs://{bucket}/runs/r", {"token": "anon", "endpoint_url": emulator.url}
    return str(tmp_path / "runs" / "r"), {}


def test_create_only_race_between_threads(shared_dir: tuple[str, dict]) -> None:
    """Eight threads create the same object at once: exactly one wins."""
    url, options = shared_dir
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: dict[int, str] = {}

    def contend(i: int) -> None:
        storage = Storage(url, options, retry=FAST)
        barrier.wait()
        try:
            storage.write_json("lease/1.json", {"writer": i}, create_only=True)
            outcomes[i] = "won"
        except FileExistsError:
            outcomes[i] = "lost"

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [i for i, outcome in outcomes.items() if outcome == "won"]
    assert len(outcomes) == writers and len(winners) == 1, outcomes
    assert Storage(url, options).read_json("lease/1.json") == {"writer": winners[0]}


RACER = textwrap.dedent(
    """
    import os, sys
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    url, endpoint, me, go = sys.argv[1:]
    from support.starting import wait_for_go
    from colab_resume.storage import Storage
    options = {"token": "anon", "endpoint_url": endpoint} if endpoint else {}
    storage = Storage(url, options)
    wait_for_go(go)  # start together, imports done
    try:
        storage.write_json("lease/1.json", {"writer": me}, create_only=True)
        print("won")
    except FileExistsError:
        print("lost")
    """
)


def test_create_only_race_between_processes(
    shared_dir: tuple[str, dict], tmp_path
) -> None:
    """Four real processes create the same object at once: exactly one wins."""
    url, options = shared_dir
    go = tmp_path / "go"
    endpoint = options.get("endpoint_url", "")
    env = {"PYTHONPATH": python_path()}
    racers = [
        Process([sys.executable, "-c", RACER, url, endpoint, str(i), str(go)], env=env)
        for i in range(4)
    ]
    try:
        start_together(racers, go)
        verdicts = [racer.expect("", timeout=60) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()
    assert sorted(verdicts) == ["lost", "lost", "lost", "won"], verdicts
    winner = verdicts.index("won")
    assert Storage(url, options).read_json("lease/1.json") == {"writer": str(winner)}


# --- listing and the server's clock ---------------------------------------------


def test_list_reports_relative_paths_sizes_times_and_crc32c(
    emulator, bucket: str
) -> None:
    """list() gives paths relative to run_dir, sizes, server times, CRC32C."""
    storage = gcs(f"gs://{bucket}/runs/r", emulator.url)
    payload = os.urandom(3000)
    storage.write_bytes("checkpoints/step-1/data.bin", payload)
    storage.write_json("run.json", {"id": 1})
    gcs(f"gs://{bucket}/runs/other", emulator.url).write_json("run.json", {})

    listed = storage.list()
    assert [o.path for o in listed] == ["checkpoints/step-1/data.bin", "run.json"]
    data = listed[0]
    assert data.size == len(payload)
    assert data.crc32c == crc32c_b64(payload)
    now = storage.server_time()
    assert all(abs(o.updated - now) < 5 for o in listed), (listed, now)
    assert storage.info("run.json") == listed[1]
    assert [o.path for o in storage.list("checkpoints")] == [
        "checkpoints/step-1/data.bin"
    ]


def test_list_of_missing_prefix_is_empty(any_storage: Storage) -> None:
    """An empty run directory or an absent prefix lists nothing, not an error."""
    assert any_storage.list() == []
    any_storage.write_json("lease/00000001.json", {})
    assert any_storage.list("checkpoints") == []
    assert [o.path for o in any_storage.list("lease")] == ["lease/00000001.json"]


def test_server_time_ignores_the_local_clock(
    emulator, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gs:// server_time() is the server's Date header, not this machine's clock."""
    storage = gcs(f"gs://{bucket}/runs/r", emulator.url)
    monkeypatch.setattr(time, "time", lambda: REAL_TIME() - 600.0)
    assert abs(time.time() - REAL_TIME()) > 590  # the patch is in force
    assert abs(storage.server_time() - REAL_TIME()) < 3.0


# --- untrusted records ------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"[1, 2, 3]",
        b"\xff\xfe\x00{}",
        b"{" + b" " * (5 << 20) + b"}",
    ],
    ids=["empty", "bad-json", "json-list", "not-utf8", "5MB"],
)
def test_read_json_rejects_untrusted_content(
    any_storage: Storage, content: bytes
) -> None:
    """Damaged or hostile records raise CorruptRecordError naming object and fix."""
    any_storage.write_bytes("heartbeat/00000001.json", content)
    with pytest.raises(CorruptRecordError) as caught:
        any_storage.read_json("heartbeat/00000001.json")
    message = str(caught.value)
    assert f"{any_storage.url}/heartbeat/00000001.json" in message
    assert "Delete" in message


# --- bad inputs ---------------------------------------------------------------------


def test_unknown_scheme_names_the_supported_ones() -> None:
    with pytest.raises(UnsupportedURLError, match="Unknown URL scheme 'foo://'") as e:
        Storage("foo://x/run")
    assert "gs://bucket/path" in str(e.value)


def test_gs_url_without_bucket_says_what_to_write() -> None:
    with pytest.raises(UnsupportedURLError, match="names no bucket") as e:
        Storage("gs://", {"token": "anon"})
    assert "gs://BUCKET/runs/NAME" in str(e.value)


def test_missing_bucket_says_how_to_create_it(emulator) -> None:
    """check() and a first write into a missing bucket raise BucketNotFoundError."""
    storage = gcs("gs://no-such-bucket-here/runs/r", emulator.url)
    for operation in (storage.check, lambda: storage.write_json("run.json", {})):
        with pytest.raises(BucketNotFoundError) as caught:
            operation()
        assert "gcloud storage buckets create gs://no-such-bucket-here" in str(
            caught.value
        )


def test_no_credentials_says_how_to_authenticate(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without any credentials, gs:// fails fast with how to get some."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login there
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setattr(auth, "_authenticated", None)
    started = time.monotonic()
    with pytest.raises(NoCredentialsError) as caught:
        Storage("gs://some-bucket/runs/r")
    assert time.monotonic() - started < 10
    assert "cr.authenticate()" in str(caught.value)
    assert "gcloud auth application-default login" in str(caught.value)


def test_permission_denied_names_principal_bucket_and_fix(
    fault_proxy: FaultProxy, through_proxy: Storage, bucket: str
) -> None:
    """A 403 is not retried and becomes PermissionDeniedError with the IAM fix."""
    fault_proxy.set_mix(
        FaultMix(error_rate=1.0, statuses=(403,), match=path_contains(f"/b/{bucket}"))
    )
    with pytest.raises(PermissionDeniedError) as caught:
        through_proxy.write_json("run.json", {})
    message = str(caught.value)
    assert "anonymous (token='anon')" in message
    assert f"gs://{bucket}" in message
    assert (
        "add-iam-policy-binding" in message and "roles/storage.objectAdmin" in message
    )
    assert fault_proxy.counts["error:403"] == 1  # neither gcsfs nor we retried


def test_missing_object_is_not_retried(
    fault_proxy: FaultProxy, through_proxy: Storage
) -> None:
    """A 404 is answered once: FileNotFoundError, no retry by gcsfs or by us."""
    with pytest.raises(FileNotFoundError):
        through_proxy.read_json("run.json")
    gets = [s for s in fault_proxy.seen if "run.json" in s.path]
    assert len(gets) == 1, fault_proxy.seen


# --- transient faults are retried -------------------------------------------------


def once(**mix) -> FaultMix:
    """One fault of the given kind on the next request, then none."""
    return FaultMix(max_faults=1, **mix)


@pytest.mark.parametrize(
    "status, operation",
    [(503, "write"), (429, "read"), (500, "list")],
)
def test_error_status_is_retried(
    fault_proxy: FaultProxy, through_proxy: Storage, status: int, operation: str
) -> None:
    """5xx and 429 answers cost a retry, not the operation."""
    through_proxy.write_json("run.json", {"id": 7})
    fault_proxy.set_mix(once(error_rate=1.0, statuses=(status,)))
    if operation == "write":
        through_proxy.write_json("run.json", {"id": 8})
    elif operation == "read":
        assert through_proxy.read_json("run.json") == {"id": 7}
    else:
        assert [o.path for o in through_proxy.list()] == ["run.json"]
    assert fault_proxy.counts[f"error:{status}"] == 1


def test_connection_reset_is_retried(
    fault_proxy: FaultProxy, through_proxy: Storage
) -> None:
    """A TCP reset on a write and on a read is retried; the data is intact."""
    fault_proxy.set_mix(once(reset_rate=1.0))
    through_proxy.write_json("run.json", {"id": 1})
    fault_proxy.set_mix(once(reset_rate=1.0))
    assert through_proxy.read_json("run.json") == {"id": 1}
    assert fault_proxy.counts["reset"] == 2


def test_truncated_download_is_retried(
    fault_proxy: FaultProxy, through_proxy: Storage, tmp_path
) -> None:
    """A body cut short (read and get_file) is fetched again, never returned short."""
    payload = os.urandom(200_000)
    through_proxy.write_bytes("data.bin", payload)
    fault_proxy.set_mix(once(truncate_rate=1.0, match=path_contains("data.bin", "GET")))
    assert through_proxy.read_bytes("data.bin") == payload
    fault_proxy.set_mix(once(truncate_rate=1.0, match=path_contains("data.bin", "GET")))
    through_proxy.get_file("data.bin", str(tmp_path / "copy.bin"))
    assert (tmp_path / "copy.bin").read_bytes() == payload
    assert fault_proxy.counts["truncate"] == 2


def test_create_whose_response_was_lost_still_wins(
    fault_proxy: FaultProxy, through_proxy: Storage
) -> None:
    """A create that landed but whose answer was cut is not reported as lost.

    gcsfs retries it and meets its own object (412); the write id tells.
    """
    fault_proxy.set_mix(once(truncate_rate=1.0, match=path_contains("/upload/")))
    through_proxy.write_json("lease/00000001.json", {"session": "me"}, create_only=True)
    assert fault_proxy.counts["truncate"] == 1
    uploads = [s for s in fault_proxy.seen if "/upload/" in s.path]
    assert len(uploads) == 2  # the cut one and the retry that met a 412
    assert through_proxy.read_json("lease/00000001.json") == {"session": "me"}
    with pytest.raises(FileExistsError):  # a genuinely second create still loses
        through_proxy.write_json(
            "lease/00000001.json", {"session": "me"}, create_only=True
        )


def test_stall_is_cut_by_requests_timeout_and_retried(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    """A request that hangs forever times out and is retried by our policy."""
    retries: list[tuple[str, int]] = []
    storage = gcs(
        f"gs://{bucket}/runs/r",
        fault_proxy.url,
        on_retry=lambda op, attempt, exc, delay: retries.append((op, attempt)),
    )
    storage.write_json("run.json", {"id": 3})
    fault_proxy.set_mix(once(stall_rate=1.0, stall_seconds=None))
    assert storage.read_json("run.json") == {"id": 3}
    assert fault_proxy.counts["stall"] == 1
    assert retries == [("read run.json", 1)]


def test_streamed_upload_survives_faults_on_its_request(
    fault_proxy: FaultProxy, through_proxy: Storage, tmp_path
) -> None:
    """A 6 MB put_file (a resumable session, its body streamed) survives a
    reset and a 503 on the streamed request: each retry starts afresh."""
    source = tmp_path / "ckpt.data"
    payload = os.urandom(6 << 20)
    source.write_bytes(payload)
    fault_proxy.set_mix(
        FaultMix(
            reset_rate=0.5,
            error_rate=0.5,
            seed=3,
            max_faults=2,
            statuses=(503,),
            match=path_contains("upload_id="),
        )
    )
    through_proxy.put_file(str(source), "checkpoints/ckpt.data")
    assert fault_proxy.faults() == 2
    assert through_proxy.read_bytes("checkpoints/ckpt.data") == payload
    info = through_proxy.info("checkpoints/ckpt.data")
    assert info.size == len(payload) and info.crc32c == crc32c_b64(payload)


def test_a_large_upload_is_one_session_and_one_streamed_request(
    fault_proxy: FaultProxy, through_proxy: Storage, tmp_path
) -> None:
    """A 20 MB shard goes as one request after its session's start, whatever
    the piece size asked: pieces a request each cost the server a request
    each (and on GCS a round trip each)."""
    source = tmp_path / "ckpt.data"
    payload = os.urandom(20 << 20)
    source.write_bytes(payload)
    before = fault_proxy.counts["requests"]
    through_proxy.put_file(str(source), "checkpoints/ckpt.data", chunk_bytes=4 << 20)
    assert fault_proxy.counts["requests"] - before == 2
    info = through_proxy.info("checkpoints/ckpt.data")
    assert info.size == len(payload) and info.crc32c == crc32c_b64(payload)


def test_seeded_fault_mix_over_many_operations(
    fault_proxy: FaultProxy, through_proxy: Storage
) -> None:
    """Records written and read under a mix of all faults come back intact."""
    fault_proxy.set_mix(
        FaultMix(error_rate=0.1, reset_rate=0.1, truncate_rate=0.1, seed=11)
    )
    for i in range(6):
        through_proxy.write_json(f"heartbeat/{i}.json", {"beat": i})
        assert through_proxy.read_json(f"heartbeat/{i}.json") == {"beat": i}
    assert [o.path for o in through_proxy.list("heartbeat")] == [
        f"heartbeat/{i}.json" for i in range(6)
    ]
    assert fault_proxy.faults() >= 2, fault_proxy.counts


# --- outages -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["503", "reset"])
def test_outage_longer_than_budget_raises_within_budget(
    fault_proxy: FaultProxy, bucket: str, kind: str
) -> None:
    """An outage beyond RetryPolicy.total_seconds ends in StorageUnavailableError.

    gcsfs's own retry loop (~31 s) would outlast a 2 s budget; the deadline
    Storage passes to each call keeps the whole call within the budget.
    """
    budget = 2.0
    storage = gcs(
        f"gs://{bucket}/runs/r",
        fault_proxy.url,
        retry=RetryPolicy(total_seconds=budget, initial_seconds=0.05, max_seconds=0.2),
    )
    storage.write_json("run.json", {})
    fault_proxy.start_outage(kind=kind)
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="Check the network"):
        storage.read_json("run.json")
    elapsed = time.monotonic() - started
    assert fault_proxy.counts["outage"] >= 1
    # Far below gcsfs's own ~31 s, with room for a loaded machine's slow
    # last attempt.
    assert budget * 0.8 <= elapsed < budget + 5, elapsed


def test_outage_shorter_than_budget_is_ridden_out(
    fault_proxy: FaultProxy, through_proxy: Storage
) -> None:
    """A one-second outage delays a write; it does not fail it."""
    fault_proxy.outage(1.0)
    through_proxy.write_json("heartbeat/00000001.json", {"beat": 1})
    assert fault_proxy.counts["outage"] >= 1
    assert through_proxy.read_json("heartbeat/00000001.json") == {"beat": 1}


def test_authenticate_signs_in_only_where_the_run_dir_needs_it(tmp_path, monkeypatch):
    """The README's cell, for a local run directory off Colab: no sign-in,
    no credentials looked for (the lookup would fail here)."""
    from colab_resume.storage import auth, sign_in

    def no_lookup(*args, **kwargs):
        raise AssertionError("looked for credentials")

    monkeypatch.setattr(auth, "_default_credentials", no_lookup)
    assert cr.authenticate(run_dir=str(tmp_path / "runs" / "mnist")) is None
    assert cr.authenticate(run_dir="memory://runs/mnist") is None
    for url in ("gs://b/runs/r", "gdrive://runs/r", "/content/drive/MyDrive/runs/r"):
        assert sign_in.needs_google_sign_in(url), url
        with pytest.raises(AssertionError, match="looked for credentials"):
            cr.authenticate(run_dir=url)

"""A Drive run folder as people and programs treat it: the trash, copies,
files dropped in, an edited index.

Against the Drive API emulator (google-drive-mock with the routes
tests/drive_mock/server.js adds: owners, appProperties merged as Drive
merges them, a folder's delete taking its contents). Every test here
failed before files carried the run's proof (docs/protocol.md, "Drive:
provenance"): the index was the only truth about which files were the
run's, so whatever it named was read, overwritten and deleted.
"""

from __future__ import annotations

import ast
import json
import logging
import pathlib
import random
import time
import urllib.request

import pytest
from support import assert_bitwise_equal, run_cli, steps_here, train_agent

from colab_resume.errors import CorruptRecordError, NoCredentialsError, RunInUseError
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.protocol import rundir
from colab_resume.redact import redact
from colab_resume.retry import RetryPolicy
from colab_resume.storage import Storage, drive_proof, drivefs, split_url
from colab_resume.storage.drive import DriveStore
from colab_resume.storage.drive_choice import AmbiguousRunFolderError
from colab_resume.storage.drive_index import (
    INDEX_NAME,
    MAX_INDEX_BYTES,
    DamagedIndexError,
)
from colab_resume.storage.retry import call_with_retry

FAST = RetryPolicy(total_seconds=20.0, initial_seconds=0.01, max_seconds=0.05)
CHECKPOINT = "checkpoints/step-000000003.e00000001"


def open_store(url: str, options: dict) -> DriveStore:
    protocol, root = split_url(url)
    return DriveStore(url, protocol, root, dict(options))


def folder_of(store: DriveStore) -> str:
    folder = store._run_folder(create=False, timeout=10)
    assert folder is not None
    return folder


def parent_of(store: DriveStore) -> str:
    return str(store.api.get(folder_of(store), "parents", timeout=10)["parents"][0])


def index_id(store: DriveStore) -> str:
    store._run_folder(create=True, timeout=10)
    assert store.folder.index_id is not None
    return store.folder.index_id


def trash(store: DriveStore, file_id: str) -> None:
    """What the web UI's "Move to trash" does."""
    store.api.update_metadata(file_id, trashed=True, timeout=10)


def edit_index(store: DriveStore, entries: dict[str, str]) -> None:
    """A person (or program) rewriting the index by hand."""
    store.api.replace(
        index_id(store),
        json.dumps({"format": 2, "files": entries}).encode(),
        None,
        timeout=10,
    )


def content(store: DriveStore, file_id: str) -> bytes:
    with store.api.download(file_id, timeout=10) as response:
        return response.content


def foreign_file(emulator, name: str, parent: str, text: str) -> str:
    """A file another user owns, shared with this one (emulator route)."""
    request = urllib.request.Request(
        f"{emulator.url}/debug/foreign-file",
        data=json.dumps({"name": name, "parents": [parent], "content": text}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return str(json.load(reply)["id"])


def damage_uploads(emulator, count: int) -> None:
    """The next ``count`` uploads arrive with a byte flipped (emulator route)."""
    request = urllib.request.Request(
        f"{emulator.url}/debug/corrupt-uploads?count={count}", method="POST"
    )
    urllib.request.urlopen(request, timeout=10).close()


def a_run(url: str, options: dict) -> DriveStore:
    """A run folder as a session leaves it: its run record, lease 1 and
    heartbeat (a real session, stopped), and a checkpoint's files."""
    RunSession.open(Storage(url, options), SessionOptions(heartbeat_seconds=1)).close()
    store = open_store(url, options)
    store.write(f"{CHECKPOINT}/ckpt.data", b"weights", create_only=False, write_id="c")
    store.write(f"{CHECKPOINT}/MANIFEST.json", b"{}", create_only=True, write_id="m")
    assert RUN_FILES <= set(store.folder.read(10))
    return store


def run_files(store: DriveStore) -> set[str]:
    return set(store.folder.read(10))


RUN_FILES = {
    "run.json",
    rundir.lease_path(1),
    rundir.heartbeat_path(1),
    f"{CHECKPOINT}/ckpt.data",
    f"{CHECKPOINT}/MANIFEST.json",
}


# --- rule 1: nothing without the run's proof is written or deleted -----------


def test_an_index_entry_naming_a_users_file_never_overwrites_or_deletes_it(
    drive_run_dir, drive_options, drive_emulator
) -> None:
    store = a_run(drive_run_dir, drive_options)
    theirs = foreign_file(drive_emulator, "notes.txt", parent_of(store), "my notes")
    mine = store.api.create(
        {"name": "results.csv", "parents": [parent_of(store)]},
        b"a,b\n1,2\n",
        None,
        timeout=10,
    )["id"]
    entries = store.folder.read(10)
    edit_index(store, {**entries, rundir.heartbeat_path(1): mine, "notes": theirs})

    session = open_store(drive_run_dir, drive_options)  # the next session
    beat = rundir.heartbeat_path(1)
    session.write(beat, b"beat 2", create_only=False, write_id="")
    session.delete("notes")
    assert content(session, mine) == b"a,b\n1,2\n"  # never overwritten
    assert content(session, theirs) == b"my notes"  # never deleted
    assert session.read(beat) == b"beat 2"  # a file of its own
    assert session.folder.read(10)[beat] != mine


def test_prune_spares_a_users_folder_that_the_index_names_as_a_checkpoint_file(
    drive_run_dir, drive_options
) -> None:
    store = a_run(drive_run_dir, drive_options)
    folder = folder_of(store)
    users = store.api.create_folder("checkpoints", folder, timeout=10)
    inside = store.api.create(
        {"name": "paper.pdf", "parents": [users]}, b"%PDF", None, timeout=10
    )["id"]
    stray = store.api.create(  # no proof, a checkpoint's name
        {"name": f"{CHECKPOINT}/ckpt.index", "parents": [folder]},
        b"x",
        None,
        timeout=10,
    )["id"]
    entries = store.folder.read(10)
    edit_index(store, {**entries, f"{CHECKPOINT}/ckpt.other": users})

    # What prune and retention do to a checkpoint: delete its objects, then
    # its leftovers (tests/test_leftovers.py runs them from the CLI).
    storage = Storage(drive_run_dir, drive_options)
    for item in storage.list(CHECKPOINT):
        storage.delete(item.path)
    storage.delete(f"{CHECKPOINT}/ckpt.other")
    storage.remove_leftovers(CHECKPOINT)
    assert store.api.get(users, "id", timeout=10)["id"] == users
    assert content(store, inside) == b"%PDF"
    assert content(store, stray) == b"x"  # not the run's, whatever its name
    assert storage.list(CHECKPOINT) == []


def test_a_file_dropped_in_with_a_run_files_name_is_not_read_as_it(
    drive_run_dir, drive_options
) -> None:
    store = a_run(drive_run_dir, drive_options)
    store.api.create(
        {"name": "DONE.json", "parents": [folder_of(store)]}, b"{}", None, timeout=10
    )
    reader = open_store(drive_run_dir, drive_options)
    assert not reader.exists("DONE.json")
    assert {o.path for o in reader.list("")} == run_files(store)


# --- rule 2: the files are the truth; the index a cache -----------------------


def test_a_trashed_index_is_the_runs_still_and_the_next_writer_restores_it(
    drive_run_dir, drive_options
) -> None:
    store = a_run(drive_run_dir, drive_options)
    index = index_id(store)
    trash(store, index)

    reader = open_store(drive_run_dir, drive_options)
    assert {o.path for o in reader.list("")} == run_files(store)  # not a new run
    assert "trash" in str(reader.folder.damage)
    writer = open_store(drive_run_dir, drive_options)
    writer.write("heartbeat/00000002.json", b"b", create_only=False, write_id="")
    assert writer.folder.index_id == index
    assert store.api.get(index, "trashed", timeout=10)["trashed"] is False
    assert store.leftovers("checkpoints") == []


def test_a_deleted_index_is_rebuilt_from_the_files_proof_and_no_checkpoint_is_lost(
    drive_run_dir, drive_options, caplog
) -> None:
    store = a_run(drive_run_dir, drive_options)
    before = store.folder.read(10)
    store.api.delete(index_id(store), timeout=10)

    reader = open_store(drive_run_dir, drive_options)
    assert {o.path for o in reader.list("")} == set(before)
    assert "deleted" in str(reader.folder.damage)
    with pytest.raises(DamagedIndexError, match="colab-resume repair"):
        reader.remove_leftovers("checkpoints")  # no deletion on a lost index
    with caplog.at_level(logging.WARNING, logger="colab_resume.storage"):
        writer = open_store(drive_run_dir, drive_options)
        writer.write("heartbeat/00000002.json", b"b", create_only=False, write_id="")
    assert any("rebuilt it from the proof" in r.getMessage() for r in caplog.records)
    after = writer.folder.read(10)
    assert {rel: after[rel] for rel in before} == before
    assert writer.leftovers("checkpoints") == []


@pytest.mark.parametrize(
    "damage",
    [b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'{"format": 2, "files": {"a": 3}}', None],
    ids=["not-utf8", "wrong-shape", "wrong-types", "huge"],
)
def test_an_unreadable_index_is_never_read_as_a_new_run_and_is_repaired(
    damage, drive_run_dir, drive_options
) -> None:
    store = a_run(drive_run_dir, drive_options)
    expected = run_files(store)
    if damage is None:
        damage = b'{"files": {' + b" " * (MAX_INDEX_BYTES + 10) + b"}}"
    store.api.replace(index_id(store), damage, None, timeout=10)

    flags = ["--endpoint-url", drive_options["endpoint_url"]]
    flags += ["--token", drive_options["token"]]
    status = run_cli("status", drive_run_dir, *flags)
    assert "NEW" not in status.stdout, status.stdout
    assert "index" in status.stdout + status.stderr
    assert "Traceback" not in status.stderr, status.stderr
    reader = open_store(drive_run_dir, drive_options)
    assert {o.path for o in reader.list("")} == expected
    repaired = run_cli("repair", drive_run_dir, *flags)
    assert repaired.returncode == 0, repaired.stderr
    assert "Repaired" in repaired.stdout, repaired.stdout
    fresh = open_store(drive_run_dir, drive_options)
    fresh._run_folder(create=False, timeout=10)
    assert fresh.folder.damage is None and fresh.folder.trusted
    assert set(fresh.folder.read(10)) == expected


def test_a_fresh_run_dir_is_still_new(drive_run_dir, drive_options) -> None:
    """The check the rules above must not break: nothing there, nothing found."""
    reader = open_store(drive_run_dir, drive_options)
    assert reader._run_folder(create=False, timeout=10) is None
    assert reader.list("") == []


# --- rule 3: a failed upload leaves nothing that can be adopted ---------------


def test_a_damaged_first_upload_is_removed_and_the_run_folder_is_sound(
    drive_run_dir, drive_options, drive_emulator
) -> None:
    damage_uploads(drive_emulator, 1)
    storage = Storage(drive_run_dir, drive_options, retry=FAST)
    storage.write_bytes("run.json", b'{"run": 1}', create_only=True)
    store = open_store(drive_run_dir, drive_options)
    named = store.api.children(
        f"'{folder_of(store)}' in parents and name = '{INDEX_NAME}'",
        "id",
        timeout=10,
    )
    assert len(named) == 1  # the damaged first index is gone
    assert Storage(drive_run_dir, drive_options).read_bytes("run.json") == b'{"run": 1}'


# --- rule 4: fencing survives the loss of any one file ------------------------


@pytest.mark.parametrize("loss", ["trashed", "deleted"])
def test_an_index_lost_under_a_live_holder_admits_no_second_writer(
    loss, drive_run_dir, drive_options
) -> None:
    holder_storage = Storage(drive_run_dir, drive_options)
    holder = RunSession.open(holder_storage, SessionOptions(heartbeat_seconds=1))
    try:
        store = holder_storage.store
        assert isinstance(store, DriveStore)
        if loss == "trashed":
            trash(store, index_id(store))
        else:
            store.api.delete(index_id(store), timeout=10)
        other = Storage(drive_run_dir, drive_options)
        with pytest.raises(RunInUseError):
            RunSession.open(
                other,
                SessionOptions(heartbeat_seconds=1),
                identity=lambda: None,  # another machine: judged by beats
            )
        assert not other.exists(rundir.lease_path(2))
        # The holder's beats mend the index: restored, or rebuilt with its lease.
        deadline = time.monotonic() + 60
        while True:
            fresh = open_store(drive_run_dir, drive_options)
            fresh._run_folder(create=False, timeout=10)
            if fresh.folder.damage is None and fresh.folder.trusted:
                break
            assert time.monotonic() < deadline, fresh.folder.damage
            time.sleep(0.2)
        assert rundir.lease_path(1) in fresh.folder.read(10)
        holder.check()  # never fenced, and still the run's only writer
    finally:
        holder.close()


def test_a_heartbeat_file_deleted_by_hand_is_made_again_by_its_holder(
    drive_run_dir, drive_options
) -> None:
    store = a_run(drive_run_dir, drive_options)
    beat = "heartbeat/00000001.json"
    store.api.delete(store.folder.read(10)[beat], timeout=10)
    store.write(beat, b"beat 2", create_only=False, write_id="")
    assert open_store(drive_run_dir, drive_options).read(beat) == b"beat 2"


def test_a_trashed_lease_file_is_restored_not_taken_for_a_race(
    drive_run_dir, drive_options
) -> None:
    store = a_run(drive_run_dir, drive_options)
    lease = store.folder.read(10)[rundir.lease_path(1)]
    record = content(store, lease)
    trash(store, lease)
    reader = open_store(drive_run_dir, drive_options)
    assert reader.read(rundir.lease_path(1)) == record
    assert store.api.get(lease, "trashed", timeout=10)["trashed"] is False
    # And the next session takes lease 2: no "another session took lease 1".
    RunSession.open(
        Storage(drive_run_dir, drive_options), SessionOptions(heartbeat_seconds=1)
    ).close()
    assert Storage(drive_run_dir, drive_options).exists(rundir.lease_path(2))


# --- rule 5: one run folder, chosen by identity -------------------------------


def test_an_older_namesake_restored_from_the_trash_never_becomes_the_run(
    drive_run_dir, drive_options, caplog
) -> None:
    old = a_run(drive_run_dir, drive_options)
    old_folder = folder_of(old)
    trash(old, old_folder)
    new = a_run(drive_run_dir, drive_options)  # the run made again meanwhile
    new.write("heartbeat/00000001.json", b"newer", create_only=False, write_id="")
    new_folder = folder_of(new)
    assert new_folder != old_folder
    old.api.update_metadata(old_folder, trashed=False, timeout=10)
    with caplog.at_level(logging.WARNING, logger="colab_resume.storage"):
        reader = open_store(drive_run_dir, drive_options)
        assert folder_of(reader) == new_folder
    [said] = [
        r.getMessage()
        for r in caplog.records
        if "Drive folders match" in r.getMessage()
    ]
    assert new_folder in said and old_folder in said and "gdrive://id:" in said
    assert reader.read("heartbeat/00000001.json") == b"newer"


def test_two_namesakes_that_cannot_be_told_apart_are_refused_by_id(
    drive_run_dir, drive_options
) -> None:
    store = open_store(drive_run_dir, drive_options)
    store._run_folder(create=True, timeout=10)
    parent = parent_of(store)
    stamp = "2026-01-01T00:00:00.000Z"
    twins = []
    for _ in range(2):
        run_id = drive_proof.new_run_id()
        folder = store.api.create_folder(
            "test", parent, properties={drive_proof.RUN_KEY: run_id}, timeout=10
        )
        made = store.api.create(
            {
                "name": "run.json",
                "parents": [folder],
                "appProperties": drive_proof.stamp(run_id, "run.json"),
            },
            b"{}",
            None,
            timeout=10,
        )
        store.api.update_metadata(
            made["id"], properties={}, keep_modified=stamp, timeout=10
        )
        twins.append(folder)
    store.api.delete(folder_of(store), timeout=10)
    with pytest.raises(AmbiguousRunFolderError) as refused:
        open_store(drive_run_dir, drive_options)._run_folder(create=False, timeout=10)
    assert all(twin in str(refused.value) for twin in twins)
    assert "gdrive://id:FOLDER_ID" in str(refused.value)


# --- rule 6: self-healing and honest errors -----------------------------------


def test_a_run_folder_copied_by_hand_is_refused_with_the_cause(
    drive_run_dir, drive_options
) -> None:
    store = a_run(drive_run_dir, drive_options)
    parent = parent_of(store)
    copy = store.api.create_folder("copy", parent, timeout=10)
    for rel, file_id in store.folder.read(10).items():  # what "Make a copy" makes
        store.api.create(
            {"name": rel, "parents": [copy]}, content(store, file_id), None, timeout=10
        )
    store.api.create(
        {"name": INDEX_NAME, "parents": [copy]},
        json.dumps({"format": 2, "files": store.folder.read(10)}).encode(),
        None,
        timeout=10,
    )
    url = drive_run_dir.rsplit("/", 1)[0] + "/copy"
    with pytest.raises(CorruptRecordError, match="a copy"):
        open_store(url, drive_options).write(
            "lease/00000002.json", b"{}", create_only=True, write_id="x"
        )


def test_a_symlink_into_the_drive_mount_is_routed_through_the_api(
    tmp_path, monkeypatch
) -> None:
    point = tmp_path / "drive"
    (point / "MyDrive" / "runs").mkdir(parents=True)
    table = tmp_path / "mounts"
    table.write_text(f"drive {point} fuse.drive rw,nosuid,nodev 0 0\n")
    monkeypatch.setattr(drivefs, "MOUNTS_FILE", str(table))
    (tmp_path / "runs").symlink_to(point / "MyDrive" / "runs")
    assert split_url(str(tmp_path / "runs" / "mnist")) == ("gdrive", "runs/mnist")


def test_an_expired_bare_token_says_so_at_once(drive_run_dir, drive_options) -> None:
    storage = Storage(
        drive_run_dir,
        {**drive_options, "token": "ya29.expired-long-ago"},
        retry=RetryPolicy(total_seconds=600.0),
    )
    with pytest.raises(NoCredentialsError, match="expired"):
        storage.write_bytes("run.json", b"{}", create_only=True)


def test_resumable_upload_urls_are_redacted_in_retry_logs(caplog) -> None:
    url = (
        "https://www.googleapis.com/upload/drive/v3/files?uploadType=resumable"
        "&upload_id=ADPycdvSECRETcapability123"
    )
    assert "SECRETcapability" not in redact(f"PUT {url} failed")
    failures = iter([ConnectionError(f"Max retries exceeded with url: {url}")])

    def flaky() -> str:
        for failure in failures:
            raise failure
        return "sent"

    with caplog.at_level(logging.WARNING, logger="colab_resume.storage"):
        assert call_with_retry(flaky, operation="upload", policy=FAST) == "sent"
    assert "retry 1" in caplog.text and "SECRETcapability" not in caplog.text


def test_no_module_draws_from_the_global_random_generators() -> None:
    """A user's seeded ``random`` must not be shifted by the package's waits."""
    package = pathlib.Path(__file__).parent.parent / "colab_resume"
    drawn = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "random"
                and node.attr != "Random"
            ):
                drawn.append(f"{path.name}:{node.lineno} random.{node.attr}")
    assert drawn == []


# --- end to end: a killed run resumed after its index was lost ---------------


def test_a_killed_run_whose_index_was_trashed_resumes_bitwise_not_from_step_0(
    drive_run_dir, drive_emulator, drive_options, tmp_path
) -> None:
    """SIGKILLed after its first checkpoints, its index trashed, its resume's
    first uploads damaged: it resumes from its newest checkpoint, bit for bit."""
    reference = str(tmp_path / "reference.npz")
    total = steps_here(train_agent(str(tmp_path / "local-run"), reference))
    kill_at = random.Random().randint(11, total - 2)
    print(f"killing at step {kill_at}")
    out = str(tmp_path / "w.npz")
    killed = train_agent(
        drive_run_dir,
        out,
        *("--kill-at-step", str(kill_at), "--heartbeat-seconds", "10"),
        endpoint=drive_emulator.url,
        expect_rc=-9,
    )
    assert f"KILLING at step {kill_at}" in killed.stdout
    store = open_store(drive_run_dir, drive_options)
    trash(store, index_id(store))
    damage_uploads(drive_emulator, 3)  # and the resume's first uploads arrive damaged
    resumed = train_agent(drive_run_dir, out, endpoint=drive_emulator.url)
    # From the newest checkpoint committed before the kill (a checkpoint every
    # 5 steps; a kill while one uploads: the one before), never from step 0.
    newest = kill_at // 5 * 5
    assert steps_here(resumed) in (total - newest, total - newest + 5)
    assert_bitwise_equal(reference, out, must_contain=["seed_generator"])


def test_an_expired_resumable_session_restarts_the_upload(
    drive_run_dir, drive_emulator, tmp_path
) -> None:
    """Drive answers a chunk of an expired session 404 ("restart the upload"):
    through the fault proxy, once; the upload starts a new session."""
    from support.faultproxy import FaultMix, FaultProxy, path_contains

    shard = tmp_path / "shard"
    shard.write_bytes(random.Random(3).randbytes(6 << 20))  # resumable
    with FaultProxy(drive_emulator.url) as proxy:
        storage = Storage(drive_run_dir, drive_emulator.options(proxy.url), retry=FAST)
        proxy.set_mix(
            FaultMix(
                error_rate=1.0,
                statuses=(404,),
                match=path_contains("upload_id=", "PUT"),
                max_faults=1,
            )
        )
        storage.put_file(str(shard), f"{CHECKPOINT}/ckpt.data")
        assert proxy.faults() == 1
        back = tmp_path / "back"
        storage.get_file(f"{CHECKPOINT}/ckpt.data", str(back))
    assert back.read_bytes() == shard.read_bytes()


def test_a_folder_from_before_provenance_is_read_then_stamped_by_its_writer(
    drive_run_dir, drive_options
) -> None:
    store = open_store(drive_run_dir, drive_options)
    store._run_folder(create=True, timeout=10)
    parent = parent_of(store)
    store.api.delete(folder_of(store), timeout=10)
    folder = store.api.create_folder("test", parent, timeout=10)  # no run id
    made = store.api.create(
        {"name": "run.json", "parents": [folder]}, b'{"old": 1}', None, timeout=10
    )
    store.api.touch(made["id"], timeout=10)
    stamped = store.api.get(made["id"], "modifiedTime", timeout=10)["modifiedTime"]
    old = json.dumps({"format": 1, "files": {"run.json": made["id"]}}).encode()
    store.api.create({"name": INDEX_NAME, "parents": [folder]}, old, None, timeout=10)

    reader = open_store(drive_run_dir, drive_options)
    assert reader.read("run.json") == b'{"old": 1}'
    assert reader.folder.run_id is None  # a reader changes nothing
    writer = open_store(drive_run_dir, drive_options)
    writer.write("lease/00000001.json", b"{}", create_only=True, write_id="w")
    run_id = writer.folder.run_id
    assert run_id is not None
    raw = store.api.get(made["id"], drive_proof.FIELDS, timeout=10)
    assert raw["appProperties"] == drive_proof.stamp(run_id, "run.json")
    assert raw["modifiedTime"] == stamped  # the commit rule reads it: kept
    assert open_store(drive_run_dir, drive_options).read("run.json") == b'{"old": 1}'

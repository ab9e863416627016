"""CheckpointManager against the GCS emulator, with TensorFlow in this process.

The state here is a dict of plain ``tf.Variable``s and a
``tf.random.Generator`` (no Keras model, no strategy): enough to exercise
the commit protocol, verification, fallback, retention and error paths.
The Keras + MirroredStrategy round trip and the SIGKILL test run in fresh
processes (test_checkpoint_process.py).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from support.checkpoints import is_data_file
from support.waiting import wait_for

from colab_resume.checkpoint import (
    CheckpointManager,
    NoValidCheckpointError,
    StructureMismatchError,
)
from colab_resume.errors import FencedError
from colab_resume.events import EventLog
from colab_resume.protocol.rundir import MANIFEST, CheckpointName
from colab_resume.storage import Storage


def make_state(seed: int, rows: int = 64) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "w": tf.Variable(rng.standard_normal((rows, 32)).astype("float32")),
        "b": tf.Variable(rng.standard_normal((32,)).astype("float32")),
        "step": tf.Variable(seed, dtype=tf.int64),
        "rng": tf.random.Generator.from_seed(seed),
    }


def values(state: dict) -> dict:
    out = {k: v.numpy() for k, v in state.items() if isinstance(v, tf.Variable)}
    out["rng"] = state["rng"].state.numpy()
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key


@pytest.fixture
def storage(gcs_run_dir, gcs_options) -> Storage:
    return Storage(gcs_run_dir, gcs_options)


@pytest.fixture(autouse=True)
def _staging(tmp_path, monkeypatch):
    # Managers left open by a test stage under tmp_path, not in /tmp.
    monkeypatch.setattr(sys.modules[__name__], "STAGING", str(tmp_path / "staging"))


STAGING: str | None = None


def manager(storage, *, lease=1, fence=None, events=None, **options):
    options.setdefault("staging_dir", STAGING)
    return CheckpointManager(
        storage,
        lease=lease,
        fence=fence or (lambda: None),
        events=events or EventLog(),
        **options,
    )


def save_steps(mgr, steps, rows=64) -> dict:
    """Save one fresh state per step; returns step -> saved values."""
    saved = {}
    for step in steps:
        state = make_state(step, rows)
        state["rng"].normal([3])  # advance the generator past its seed
        mgr.save(state, step=step, epoch=step // 10, metrics={"loss": np.float32(0.5)})
        mgr.wait()
        mgr.check()
        saved[step] = values(state)
    return saved


def test_round_trip_manifest_lists_files_with_server_crc(storage):
    mgr = manager(storage, keep=5)
    saved = save_steps(mgr, [1, 2])
    assert mgr.committed() == [CheckpointName(1, 1), CheckpointName(2, 1)]
    name = CheckpointName(2, 1)
    manifest = storage.read_json(name.manifest_path)
    listed = {i.path.rsplit("/", 1)[1]: i for i in storage.list(name.path)}
    assert set(listed) == {f["name"] for f in manifest["files"]} | {MANIFEST}
    for entry in manifest["files"]:
        assert listed[entry["name"]].size == entry["size"]
        assert listed[entry["name"]].crc32c == entry["crc32c"]
    assert manifest["metrics"] == {"loss": 0.5} and manifest["step"] == 2
    assert manifest["state_format"] == "portable"

    fresh = make_state(99)
    info = manager(storage, lease=2).restore(fresh)
    assert (info.step, info.epoch, info.lease, info.skipped) == (2, 0, 1, ())
    assert_same(values(fresh), saved[2])


def test_no_checkpoints_returns_none(storage):
    assert manager(storage).restore(make_state(0)) is None


def _damage(storage, how: str) -> str:
    name = CheckpointName(2, 1)
    data = sorted(i.path for i in storage.list(name.path) if is_data_file(i.path))[0]
    full = storage.full(data)
    # Behind the manager's back, straight on the emulator.
    if how == "truncated":
        storage.fs.pipe_file(full, storage.fs.cat_file(full)[:-7])
    elif how == "corrupted":
        body = bytearray(storage.fs.cat_file(full))
        body[len(body) // 2] ^= 0xFF
        storage.fs.pipe_file(full, bytes(body))
    else:
        storage.fs.rm_file(full)
    return data.rsplit("/", 1)[1]


@pytest.mark.parametrize("prefetched", [False, True], ids=["now", "prefetched"])
@pytest.mark.parametrize("how", ["truncated", "corrupted", "missing"])
def test_damaged_newest_falls_back_with_warning(storage, how, prefetched):
    """Found by the restore itself, or by a prefetch started before the state
    was built: the same fallback, the same warning."""
    saved = save_steps(manager(storage, keep=5), [1, 2])
    bad_file = _damage(storage, how)
    events = EventLog()
    mgr = manager(storage, lease=2, events=events)
    prefetch = mgr.prefetch() if prefetched else None
    fresh = make_state(99)
    info = mgr.restore(fresh, prefetch=prefetch)
    assert info.step == 1
    assert_same(values(fresh), saved[1])
    (warning,) = events.recent(kind="checkpoint.damaged")
    assert warning.level == "warning"
    assert bad_file in warning.message and how in warning.message
    assert info.skipped[0][0] == "step-000000002.e00000001"


def _downloads(staging: str) -> list[str]:
    """The prefetch/restore download directories under ``staging``."""
    if not os.path.isdir(staging):
        return []
    return [d for d in os.listdir(staging) if d.startswith("restore-")]


def test_a_prefetched_restore_is_bitwise_and_downloads_each_file_once(storage):
    """The prefetch has the whole newest checkpoint on local disk before the
    state is even made; the restore reads those copies (verified as any
    download is) and puts back exactly what was saved."""
    saved = save_steps(manager(storage, keep=5), [1, 2])
    name = CheckpointName(2, 1)
    sizes = {
        i.path.rsplit("/", 1)[1]: i.size
        for i in storage.list(name.path)
        if not i.path.endswith(MANIFEST)
    }
    events = EventLog()
    mgr = manager(storage, lease=2, events=events)
    prefetch = mgr.prefetch()

    def all_downloaded() -> bool:
        for folder in _downloads(STAGING):
            here = os.path.join(STAGING, folder)
            if all(
                os.path.isfile(os.path.join(here, f))
                and os.path.getsize(os.path.join(here, f)) == size
                for f, size in sizes.items()
            ):
                return True
        return False

    wait_for(all_downloaded, 60, "the prefetch's download of step 2")
    fresh = make_state(99)  # the "build", after the download
    info = mgr.restore(fresh, prefetch=prefetch)
    assert (info.step, info.skipped) == (2, ())
    assert_same(values(fresh), saved[2])
    assert _downloads(STAGING) == []  # read, then deleted
    assert events.recent(kind="checkpoint.damaged") == []


def test_a_prefetch_closed_without_a_restore_leaves_nothing(storage):
    """A build that fails closes the prefetch: its files are deleted and the
    run directory is as it was."""
    save_steps(manager(storage, keep=5), [1, 2])
    before = sorted(i.path for i in storage.list("checkpoints"))
    mgr = manager(storage, lease=2)
    prefetch = mgr.prefetch()
    wait_for(lambda: _downloads(STAGING), 60, "the prefetch's download directory")
    prefetch.close()
    prefetch.close()  # idempotent
    assert _downloads(STAGING) == []
    assert sorted(i.path for i in storage.list("checkpoints")) == before
    fresh = make_state(99)
    assert mgr.restore(fresh).step == 2  # a restore after it still works


def test_memory_storage_verifies_content_after_download():
    storage = Storage(f"memory://ckpt-{time.time_ns()}")
    saved = save_steps(manager(storage, keep=5), [1, 2])
    name = CheckpointName(2, 1)
    data = next(i.path for i in storage.list(name.path) if is_data_file(i.path))
    body = bytearray(storage.read_bytes(data))
    body[-1] ^= 0x01  # same size: only a content check can tell
    storage.write_bytes(data, bytes(body))
    events, fresh = EventLog(), make_state(99)
    assert manager(storage, lease=2, events=events).restore(fresh).step == 1
    assert_same(values(fresh), saved[1])
    assert "corrupted" in events.recent(kind="checkpoint.damaged")[0].message


def test_all_damaged_raises_with_listing(storage):
    save_steps(manager(storage, keep=5), [1, 2])
    for step in (1, 2):
        storage.write_bytes(CheckpointName(step, 1).manifest_path, b"{not json")
    storage.write_bytes("checkpoints/step-000000003.e00000001/ckpt.index", b"x")
    with pytest.raises(NoValidCheckpointError) as caught:
        manager(storage, lease=2).restore(make_state(0))
    text = str(caught.value)
    for line in (
        "step-000000001.e00000001: committed",
        "step-000000002.e00000001: committed",
        "step-000000003.e00000001: uncommitted",
        "not valid JSON",
    ):
        assert line in text


def beat_reporting(storage, lease: int, checkpoint_step) -> None:  # type: ignore[no-untyped-def]
    """Lease ``lease``'s last heartbeat, as its session wrote it."""
    from colab_resume.protocol.records import BeatRecord, to_json
    from colab_resume.protocol.rundir import heartbeat_path

    beat = BeatRecord(
        session_id="s1", host="vm", lease=lease, beat=3, state="training",
        step=4, progress_at=None, since_progress_s=0.0, written_at=time.time(),
        checkpoint_step=checkpoint_step,
    )  # fmt: skip
    storage.write_json(heartbeat_path(lease), to_json(beat))


def test_a_run_whose_first_upload_was_cut_short_starts_from_step_0(storage):
    """A session killed while its first checkpoint uploaded leaves data files
    and no manifest, and no beat of it ever named a committed checkpoint:
    the next session starts from step 0 (it was refused, for good, with
    "has checkpoints but none can be restored"), saying so."""
    save_steps(manager(storage), [3])
    storage.delete(CheckpointName(3, 1).manifest_path)  # what the kill left
    beat_reporting(storage, 1, None)
    events = EventLog()
    assert manager(storage, lease=2, events=events).restore(make_state(0)) is None
    (said,) = events.recent(kind="checkpoint.none_committed")
    assert said.level == "warning" and "starts from step 0" in said.message
    assert said.data["left"] == ["step-000000003.e00000001"]


def test_a_run_whose_committed_manifests_vanished_is_still_refused(storage):
    """The same directory, but a beat reported a checkpoint committed at
    step 3: its manifest was removed, not never written. Starting over
    would silently lose the run: refused, naming the beat."""
    save_steps(manager(storage), [3])
    storage.delete(CheckpointName(3, 1).manifest_path)
    beat_reporting(storage, 1, 3)
    with pytest.raises(NoValidCheckpointError) as caught:
        manager(storage, lease=2).restore(make_state(0))
    assert "reported a committed checkpoint at step 3" in str(caught.value)


def test_structure_mismatch_names_the_variables(storage):
    save_steps(manager(storage), [1])
    other = make_state(0, rows=65)
    with pytest.raises(StructureMismatchError, match=r"w: .*\[64, 32\].*\[65, 32\]"):
        manager(storage, lease=2).restore(other)


def test_upload_failure_surfaces_on_next_check_and_save(emulator):
    # A bucket that does not exist: every upload fails for real (HTTP 404).
    storage = Storage(
        "gs://no-such-bucket-here/run", {"token": "anon", "endpoint_url": emulator.url}
    )
    events = EventLog()
    mgr = manager(storage, events=events)
    mgr.save(make_state(1), step=1, epoch=0)  # returns: the upload is background
    mgr.wait()
    with pytest.raises(FileNotFoundError):
        mgr.check()
    mgr.check()  # raised once, not forever
    (failed,) = events.recent(kind="checkpoint.failed")
    assert failed.level == "error" and failed.step == 1
    mgr.save(make_state(2), step=2, epoch=0)
    mgr.wait()
    with pytest.raises(FileNotFoundError):
        mgr.save(make_state(3), step=3, epoch=0)
    assert len(events.recent(kind="checkpoint.failed")) == 2


def test_fenced_session_never_commits(storage):
    def fence():
        raise FencedError("lease 2 took the run")

    events = EventLog()
    mgr = manager(storage, fence=fence, events=events)
    mgr.save(make_state(1), step=1, epoch=0)
    mgr.wait()
    with pytest.raises(FencedError):
        mgr.check()
    listed = [i.path for i in storage.list("checkpoints")]
    assert listed and not any(p.endswith(MANIFEST) for p in listed)
    assert events.recent(kind="checkpoint.fenced")
    assert mgr.committed() == []


class SlowUploads(Storage):
    """A real Storage whose uploads take longer, to make stalls happen.

    Only time is added; every byte still goes through gcsfs to the emulator.
    """

    def put_file(self, local_path: str, rel: str, **options: Any) -> None:
        time.sleep(0.4)
        super().put_file(local_path, rel, **options)


def test_save_while_uploading_waits_and_records_stall(gcs_run_dir, gcs_options):
    events = EventLog()
    mgr = manager(SlowUploads(gcs_run_dir, gcs_options), events=events)
    mgr.save(make_state(1), step=1, epoch=0)
    assert mgr.uploading
    mgr.save(make_state(2), step=2, epoch=0)
    mgr.close()
    (stall,) = events.recent(kind="checkpoint.stall")
    assert stall.step == 2 and stall.data["seconds"] > 0.1
    assert mgr.stall_count == 1 and mgr.stall_seconds > 0.1
    assert mgr.committed() == [CheckpointName(1, 1), CheckpointName(2, 1)]


def test_retention_keeps_newest_and_cleans_dead_leftovers(storage):
    # A dead session (lease 1) left an uncommitted upload; a newer one's is spared.
    storage.write_bytes("checkpoints/step-000000005.e00000001/ckpt.index", b"x")
    storage.write_bytes("checkpoints/step-000000009.e00000003/ckpt.index", b"x")
    mgr = manager(storage, lease=2, keep=2, keep_every_steps=4)
    save_steps(mgr, [2, 4, 6, 8, 10])
    dirs = {i.path.split("/")[1] for i in storage.list("checkpoints")}
    assert dirs == {
        "step-000000004.e00000002",  # every 4th
        "step-000000008.e00000002",
        "step-000000010.e00000002",
        "step-000000009.e00000003",  # newer lease: not ours to clean
    }


def test_retention_in_a_local_run_dir_leaves_no_empty_folders(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    mgr = manager(storage, keep=2)
    save_steps(mgr, [1, 2, 3, 4])
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == [
        "step-000000003.e00000001",
        "step-000000004.e00000001",
    ]


class DeleteFailsAfter(Storage):
    """A real Storage whose ``delete`` raises after ``budget`` calls.

    Not a mock of gcsfs: every other call, and the deletes before the
    failure, go to the emulator for real. It stands for a connection lost
    halfway through retention, which the emulator cannot be told to do at
    an exact call.
    """

    budget = 10**9

    def delete(self, rel: str) -> None:
        if self.budget <= 0:
            raise ConnectionResetError(f"injected: connection lost deleting {rel}")
        self.budget -= 1
        super().delete(rel)


# A checkpoint here is two files (manifest, one shard): fail before either.
@pytest.mark.parametrize("budget", [0, 1])
def test_failed_delete_halfway_never_loses_newest(gcs_run_dir, gcs_options, budget):
    storage = DeleteFailsAfter(gcs_run_dir, gcs_options)
    events = EventLog()
    mgr = manager(storage, keep=1, events=events)
    saved = save_steps(mgr, [1])
    assert len(storage.list(CheckpointName(1, 1).path)) == 2
    storage.budget = budget
    saved.update(save_steps(mgr, [2]))  # retention of step 1 fails partway
    assert events.recent(kind="checkpoint.prune_failed")
    assert mgr.committed()[-1] == CheckpointName(2, 1)
    if budget >= 1:  # the manifest went first: step 1 is no longer committed
        assert mgr.committed() == [CheckpointName(2, 1)]
    fresh = make_state(99)
    assert manager(storage, lease=2).restore(fresh).step == 2
    assert_same(values(fresh), saved[2])
    # The next successful prune finishes the job.
    storage.budget = 10**9
    mgr.prune()
    assert {i.path.split("/")[1] for i in storage.list("checkpoints")} == {
        "step-000000002.e00000001"
    }


def test_prune_is_fenced(storage):
    save_steps(manager(storage, keep=5), [1, 2, 3])

    def fence():
        raise FencedError("lease 2 took the run")

    with pytest.raises(FencedError):
        manager(storage, fence=fence, keep=1).prune()
    assert len(manager(storage).committed()) == 3


def test_bad_arguments_name_the_field(storage):
    with pytest.raises(ValueError, match="CheckpointConfig.keep"):
        manager(storage, keep=0)
    with pytest.raises(ValueError, match="CheckpointConfig.io_device"):
        manager(storage, io_device="localhost")
    mgr = manager(storage)
    with pytest.raises(TypeError, match="extras must hold JSON-able"):
        mgr.save(make_state(1), step=1, epoch=0, extras={"x": object()})
    with pytest.raises(TypeError, match="state must be a keras.Model or a dict"):
        mgr.save([1, 2], step=1, epoch=0)


def test_tensorflow_format_checkpoints_keep_restoring(storage):
    """Written in TensorFlow's own format (earlier versions), read by today's."""
    saved = save_steps(manager(storage, format="tensorflow"), [1])
    files = [i.path.rsplit("/", 1)[1] for i in storage.list(CheckpointName(1, 1).path)]
    assert "ckpt.index" in files and not any(f.endswith(".safetensors") for f in files)
    fresh = make_state(99)
    assert manager(storage, lease=2).restore(fresh).step == 1
    assert_same(values(fresh), saved[1])


def test_a_manifest_without_a_format_name_is_read_by_its_files(storage):
    """Manifests written before formats had names (no ``state_format``):
    TensorFlow's files and safetensors shards each restore as before."""
    saved = save_steps(manager(storage, format="tensorflow"), [1])
    saved.update(save_steps(manager(storage, lease=2), [2]))
    for name, written in (
        (CheckpointName(1, 1), "tensorflow"),
        (CheckpointName(2, 2), "portable"),
    ):
        record = storage.read_json(name.manifest_path)
        assert record.pop("state_format") == written
        storage.write_json(name.manifest_path, record)
    fresh = make_state(99)
    assert manager(storage, lease=3).restore(fresh).step == 2
    assert_same(values(fresh), saved[2])
    storage.delete(CheckpointName(2, 2).manifest_path)
    fresh = make_state(98)
    assert manager(storage, lease=4).restore(fresh).step == 1
    assert_same(values(fresh), saved[1])


def test_portable_checkpoints_are_safetensors_shards(storage):
    save_steps(manager(storage, shard_bytes=1 << 20), [1])
    files = [i.path.rsplit("/", 1)[1] for i in storage.list(CheckpointName(1, 1).path)]
    assert sorted(files) == [MANIFEST, "ckpt.safetensors"]
    big = {
        "a": tf.Variable(np.zeros((300, 1024), "float32")),
        "b": tf.Variable(np.ones((300, 1024), "float32")),
    }
    mgr = manager(storage, lease=2, shard_bytes=1 << 20)
    mgr.save(big, step=2, epoch=0)
    mgr.wait()
    mgr.check()
    files = sorted(
        i.path.rsplit("/", 1)[1] for i in storage.list(CheckpointName(2, 2).path)
    )
    assert files == [
        MANIFEST,
        "ckpt.00000-of-00002.safetensors",
        "ckpt.00001-of-00002.safetensors",
    ]
    fresh = {
        "a": tf.Variable(np.full((300, 1024), 5, "float32")),
        "b": tf.Variable(np.zeros((300, 1024), "float32")),
    }
    assert manager(storage, lease=3).restore(fresh).step == 2
    assert fresh["a"].numpy().max() == 0 and fresh["b"].numpy().min() == 1


def test_an_opaque_trackable_falls_back_to_tensorflow_format_and_says_so(storage):
    class Counter(tf.Module):
        def __init__(self):
            self.count = tf.Variable(3)

    events = EventLog()
    mgr = manager(storage, events=events)
    mgr.save({"w": tf.Variable([1.0, 2.0]), "counter": Counter()}, step=1, epoch=0)
    mgr.wait()
    mgr.check()
    (warning,) = events.recent(kind="checkpoint.format")
    assert "'counter' is a Counter" in warning.message
    assert "only the TensorFlow backend" in warning.message
    files = [i.path.rsplit("/", 1)[1] for i in storage.list(CheckpointName(1, 1).path)]
    assert "ckpt.index" in files


@pytest.mark.parametrize("format", ["portable", "tensorflow"])
def test_a_recompiled_model_saves_its_new_optimizer(tmp_path, format):
    """``model.compile`` between saves gives the model another optimizer of
    the same kind (as many variables): the next save must hold that one."""
    import keras

    def compiled(model: keras.Model, learning_rate: float) -> keras.Model:
        model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="mse")
        return model

    x = np.random.default_rng(0).standard_normal((16, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = compiled(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), 0.1)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    storage = Storage(str(tmp_path / "run"))
    mgr = manager(storage, format=format)
    mgr.save(model, step=2, epoch=1)
    mgr.wait()
    compiled(model, 0.001).fit(x, y, batch_size=4, epochs=1, verbose=0)
    mgr.save(model, step=6, epoch=2)
    mgr.wait()
    mgr.check()

    fresh = compiled(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), 0.5)
    assert manager(storage, lease=2).restore(fresh).step == 6
    new = [v.numpy() for v in model.optimizer.variables]
    assert [v.numpy() for v in fresh.optimizer.variables[:1]] == [4]  # iterations
    assert np.isclose(fresh.optimizer.learning_rate.numpy(), 0.001)
    for index, (mine, saved) in enumerate(
        zip(new, [v.numpy() for v in fresh.optimizer.variables], strict=True)
    ):
        assert np.array_equal(mine, saved), f"optimizer variable #{index}"


def test_a_local_manifest_linked_after_a_takeover_is_late(tmp_path, monkeypatch):
    """The fencing window on a local disk: a takeover between the manifest's
    write and its link. The manifest's bytes are older than lease 2, but it
    became visible after it, so it must not count as committed.

    The takeover is placed in that window by wrapping ``os.link`` as the
    local store calls it; the lease, the files and the listing are real.
    """
    import colab_resume.storage.local as local
    from colab_resume.heartbeat.lease import take_lease
    from colab_resume.protocol.listing import RunListing
    from colab_resume.protocol.records import LeaseRecord

    run = str(tmp_path / "run")
    storage = Storage(run)
    real_link = os.link
    took = []

    def link_after_a_takeover(source: str, target: str) -> None:
        if target.endswith(MANIFEST) and not took:
            written = os.stat(source).st_mtime_ns
            # File stamps are coarse (a clock tick): wait for the next tick,
            # so lease 2 is stamped strictly after the manifest's bytes.
            probe = tmp_path / "probe"
            while probe.touch() or os.stat(probe).st_mtime_ns <= written:
                time.sleep(0.001)
            record = LeaseRecord(
                lease=2,
                session_id="successor",
                host="elsewhere",
                pid=1,
                created_at=time.time(),
                package_version="test",
                heartbeat_seconds=10.0,
                dead_after_seconds=40.0,
                stall_after_seconds=600.0,
            )
            take_lease(Storage(run), record)
            took.append(written)
        real_link(source, target)

    monkeypatch.setattr(local.os, "link", link_after_a_takeover)
    save_steps(manager(storage), [1])
    assert took, "the takeover never landed inside the manifest's write"
    lease_2 = os.stat(tmp_path / "run" / "lease" / "00000002.json").st_mtime_ns
    assert took[0] < lease_2  # the manifest's bytes came first: the old rule's trap
    # Late, so not committed: the holder's retention already removed it
    # as a fenced session's leftover, or it is listed as late.
    listing = RunListing.read(Storage(run))
    assert listing.committed == ()
    assert all(c.committed_late for c in listing.checkpoints)


def test_a_first_checkpoint_commits_before_the_next_saves_are_set_up(tmp_path):
    """The portable format traces its one-call read of every variable (a
    few tenths of a second) after the first commit, not before it: a
    session killed in its first seconds has a checkpoint by then."""
    ready_at_commit: list[bool] = []

    class Watched(Storage):
        def write_json(self, rel: str, value: Any, **options: Any) -> None:
            if rel.endswith(MANIFEST):
                ready_at_commit.append(bool(mgr._state._reader))
            super().write_json(rel, value, **options)

    mgr = manager(Watched(str(tmp_path / "run")), format="portable")
    state = {"w": tf.Variable(np.ones((4, 4), "float32"))}
    for step in (1, 2):
        mgr.save(state, step=step, epoch=0)
        mgr.wait()
    mgr.close()
    assert ready_at_commit == [False, True]

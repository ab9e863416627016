"""Frozen arrays written once per run as shared objects (``frozen="once"``).

A Keras model with a LoRA-enabled ``Dense`` (``layer.enable_lora(rank)``: the
kernel frozen, two small trainable factors) and a layer set
``trainable = False``, trained for real with TensorFlow in this process;
checkpoints through :class:`CheckpointManager` into the GCS emulator and a
local run directory. The first save writes the frozen arrays under
``objects/``, later saves only the trained part; a restore reads both; a
damaged object is stood in for by the arrays ``build_model()`` made, or
names the object when those differ.
"""

from __future__ import annotations

import json
import os
import threading

import keras
import numpy as np
import pytest

import colab_resume as cr
from colab_resume.agent.options import AgentOptions
from colab_resume.checkpoint import (
    CheckpointManager,
    FrozenArraysChangedError,
    NoValidCheckpointError,
)
from colab_resume.checkpoint.manager import CheckpointConfig
from colab_resume.events import EventLog
from colab_resume.protocol.objects import OBJECT_DIR
from colab_resume.storage import Storage

BASE = 256  # the frozen kernel: 256 x 256 float32, 256 KiB


def lora_model(seed: int = 1) -> keras.Model:
    """Embedding-like frozen input layer, a LoRA Dense, a trained head."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((BASE,)),
            keras.layers.Dense(BASE, name="frozen_proj"),
            keras.layers.Dense(BASE, name="lora"),
            keras.layers.Dense(1, name="head"),
        ]
    )
    model.get_layer("frozen_proj").trainable = False
    model.get_layer("lora").enable_lora(2)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    return model


def train(model: keras.Model, steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8 * steps, BASE)).astype("float32")
    model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0, shuffle=False)


def variables(model: keras.Model) -> list[np.ndarray]:
    return [np.asarray(v.numpy()) for v in model.variables] + [
        np.asarray(v.numpy()) for v in model.optimizer.variables
    ]


def manager(storage: Storage, tmp_path, events=None, **options) -> CheckpointManager:
    return CheckpointManager(
        storage,
        lease=1,
        fence=lambda: None,
        events=events or EventLog(),
        staging_dir=str(tmp_path / "staging"),
        **options,
    )


def own_bytes(storage: Storage, step: int) -> int:
    prefix = f"checkpoints/step-{step:09d}.e00000001/"
    return sum(
        i.size for i in storage.list(prefix) if not i.path.endswith("MANIFEST.json")
    )


def objects_of(storage: Storage) -> dict[str, int]:
    return {i.path: i.size for i in storage.list(OBJECT_DIR + "/")}


FROZEN_BYTES = 2 * BASE * BASE * 4  # frozen_proj's kernel and LoRA's kernel
FROZEN_BYTES += BASE * 4  # frozen_proj's bias


@pytest.fixture(params=["gcs", "drive", "local"])
def storage(request, tmp_path) -> Storage:
    if request.param == "local":
        return Storage(str(tmp_path / "run"))
    return Storage(
        request.getfixturevalue(f"{request.param}_run_dir"),
        request.getfixturevalue(f"{request.param}_options"),
    )


def test_later_saves_hold_only_the_trained_part_and_restore_bitwise(storage, tmp_path):
    model = lora_model()
    train(model, 2)
    events = EventLog()
    with manager(storage, tmp_path, events=events, keep=5) as saving:
        saving.save(model, step=2, epoch=0)
        saving.wait()
        objects = objects_of(storage)
        # The frozen arrays, once, content-addressed.
        assert len(objects) == 1
        assert FROZEN_BYTES < sum(objects.values()) < FROZEN_BYTES + 4096
        first = own_bytes(storage, 2)
        train(model, 2, seed=1)
        saving.save(model, step=4, epoch=0)
        saving.wait()
    assert objects_of(storage) == objects  # nothing uploaded again
    first_commit, later_commit = events.recent(kind="checkpoint.committed")
    assert "frozen='once': 0.5 MB of frozen arrays in shared objects, 0.5 MB " in (
        first_commit.message
    )
    assert later_commit.message.endswith(
        "frozen='once': 0.5 MB of frozen arrays in shared objects, already stored, "
        "not uploaded)"
    )
    assert later_commit.data["uploaded_bytes"] == later_commit.data["bytes"]
    later = own_bytes(storage, 4)
    assert later == first  # the trained part only, both times
    assert later < FROZEN_BYTES / 20
    manifest = storage.read_json("checkpoints/step-000000004.e00000001/MANIFEST.json")
    name = next(iter(objects)).split("/")[1]
    assert [f["name"] for f in manifest["objects"]["files"]] == [name]
    assert sorted(manifest["objects"]["arrays"]) == [
        "model/000000",
        "model/000001",
        "model/000002",
    ]
    expected = variables(model)

    fresh = lora_model(seed=1)
    train(fresh, 1, seed=9)  # other trained values, the same frozen ones
    with manager(storage, tmp_path) as reading:
        info = reading.restore(fresh)
    assert info is not None and info.step == 4
    for want, got in zip(expected, variables(fresh), strict=True):
        assert np.array_equal(want, got)


def test_every_mode_writes_every_array_into_every_checkpoint(storage, tmp_path):
    model = lora_model()
    train(model, 1)
    with manager(storage, tmp_path, frozen="every") as saving:
        saving.save(model, step=1, epoch=0)
        saving.wait()
    assert objects_of(storage) == {}
    assert own_bytes(storage, 1) > FROZEN_BYTES


def damage_object(storage: Storage, tmp_path) -> str:
    """Flip a byte of the one shared object (a local copy, uploaded over it)."""
    (info,) = storage.list(OBJECT_DIR + "/")
    local = str(tmp_path / "object")
    storage.get_file(info.path, local)
    data = bytearray(open(local, "rb").read())
    data[-1] ^= 0xFF
    storage.write_bytes(info.path, bytes(data))
    return info.path


def test_a_damaged_object_is_stood_in_for_by_the_rebuilt_arrays_and_rewritten(
    storage, tmp_path
):
    model = lora_model()
    train(model, 2)
    with manager(storage, tmp_path) as saving:
        saving.save(model, step=2, epoch=0)
        saving.wait()
    expected = variables(model)
    path = damage_object(storage, tmp_path)

    fresh = lora_model(seed=1)  # build_model() makes the same frozen arrays
    events = EventLog()
    with manager(storage, tmp_path, events=events) as again:
        info = again.restore(fresh)
        assert info is not None and info.step == 2
        for want, got in zip(expected, variables(fresh), strict=True):
            assert np.array_equal(want, got)
        # The next save writes the object anew, whatever the listing says.
        again.save(fresh, step=3, epoch=0)
        again.wait()
    repaired = str(tmp_path / "repaired")
    storage.get_file(path, repaired)
    name = os.path.basename(path)
    import hashlib

    assert (
        hashlib.sha256(open(repaired, "rb").read()).hexdigest() + (".safetensors")
        == name
    )


def test_a_damaged_object_and_another_base_fall_back_naming_the_object(
    storage, tmp_path
):
    model = lora_model()
    train(model, 2)
    with manager(storage, tmp_path) as saving:
        saving.save(model, step=2, epoch=0)
        saving.wait()
    path = damage_object(storage, tmp_path)

    other = lora_model(seed=2)  # another frozen base
    with manager(storage, tmp_path) as reading:
        with pytest.raises(NoValidCheckpointError) as caught:
            reading.restore(other)
    message = str(caught.value)
    assert f"shared object {path}" in message
    assert "model/000000" in message and "cannot stand in" in message


def test_retention_keeps_an_object_while_a_kept_checkpoint_references_it(
    tmp_path,
):
    storage = Storage(str(tmp_path / "run"))
    first, second = lora_model(seed=1), lora_model(seed=2)
    for model in (first, second):
        train(model, 1)
    events = EventLog()
    with manager(storage, tmp_path, events=events, keep=2) as saving:
        saving.save(first, step=1, epoch=0)
        saving.save(first, step=2, epoch=0)
        saving.wait()
        (old,) = objects_of(storage)
        # Another base (a changed model): its own object.
        saving.save(second, step=3, epoch=0)
        saving.wait()
        assert old in objects_of(storage)  # step 2, kept, references it
        saving.save(second, step=4, epoch=0)
        saving.wait()
    (new,) = objects_of(storage)
    assert new != old
    pruned = events.recent(kind="checkpoint.objects_pruned")
    assert [e.data["objects"] for e in pruned] == [[old]]


def test_frozen_option_is_checked_with_the_fix():
    with pytest.raises(ValueError) as caught:
        AgentOptions(frozen="onse")
    assert str(caught.value) == (
        "frozen must be 'once' (arrays no step changes are written once per run), "
        "'rebuild' (not written; build_model() makes them, checked by fingerprint) "
        "or 'every' (into every checkpoint), got 'onse'. Did you mean 'once'?"
    )
    assert AgentOptions().frozen == "once"
    assert CheckpointConfig(frozen="every").frozen == "every"


def test_the_manifest_round_trips_its_objects(storage, tmp_path):
    from colab_resume.protocol.manifest import Manifest

    model = lora_model()
    train(model, 1)
    with manager(storage, tmp_path) as saving:
        saving.save(model, step=1, epoch=0)
        saving.wait()
    raw = storage.read_json("checkpoints/step-000000001.e00000001/MANIFEST.json")
    parsed = Manifest.from_json(json.loads(json.dumps(raw)))
    assert parsed.to_json() == raw


def committed_references(storage: Storage) -> dict[str, list[str]]:
    """Committed checkpoint -> the objects its manifest references."""
    from colab_resume.checkpoint.fetch import read_manifest
    from colab_resume.protocol.listing import RunListing

    found = {}
    for entry in RunListing.read(storage).committed:
        manifest = read_manifest(storage, entry)
        shared = manifest.objects.files if manifest.objects else ()
        found[entry.name.dirname] = [f"{OBJECT_DIR}/{f.name}" for f in shared]
    return found


def test_prune_killed_before_any_of_its_deletions_never_loses_a_kept_object(
    tmp_path,
):
    """A real SIGKILL of ``prune`` before each of its deletions in turn."""
    import shutil

    from support import run_worker, worker

    from colab_resume.checkpoint import objects
    from colab_resume.protocol.listing import RunListing

    pristine = str(tmp_path / "pristine")
    storage = Storage(pristine)
    first, second = lora_model(seed=1), lora_model(seed=2)
    for model in (first, second):
        train(model, 1)
    with manager(storage, tmp_path, keep=10) as saving:
        for step, model in ((1, first), (2, first), (3, second), (4, second)):
            saving.save(model, step=step, epoch=0)
        saving.wait()
    expected = variables(second)
    refs = committed_references(storage)
    (old,) = refs["step-000000001.e00000001"]
    (new,) = refs["step-000000004.e00000001"]
    assert old != new and set(objects_of(storage)) == {old, new}
    # Three checkpoint directories of two files each, then the old object.
    deletions = 7
    for hang_at in range(deletions + 1):
        run_dir = str(tmp_path / f"run-{hang_at}")
        shutil.copytree(pristine, run_dir)
        copy = Storage(run_dir)
        with worker(
            "killed_pruner", run_dir, "--keep", "1", "--hang-at", str(hang_at)
        ) as pruning:
            if hang_at < deletions:
                pruning.expect("HANGING BEFORE", timeout=120)
                pruning.kill()
            else:
                assert pruning.expect("PRUNED", timeout=120) == "PRUNED 4 7"
        # Whatever was deleted, every committed checkpoint's objects are there.
        for checkpoint, paths in committed_references(copy).items():
            for path in paths:
                assert path in objects_of(copy), (hang_at, checkpoint, path)
        # The next prune finishes the job: only what step 4 references stays.
        run_worker("killed_pruner", run_dir, "--keep", "1", "--hang-at", "99")
        assert set(objects_of(copy)) == {new}
        assert objects.unreferenced(copy, RunListing.read(copy)) == []
        assert list(committed_references(copy)) == ["step-000000004.e00000001"]
    fresh = lora_model(seed=2)
    with manager(Storage(str(tmp_path / "run-0")), tmp_path) as reading:
        assert reading.restore(fresh).step == 4
    for want, got in zip(expected, variables(fresh), strict=True):
        assert np.array_equal(want, got)


def test_verify_reads_every_object_and_names_a_damaged_shared_one(
    storage, tmp_path, request
):
    from support import run_cli

    model = lora_model()
    train(model, 1)
    with manager(storage, tmp_path) as saving:
        saving.save(model, step=1, epoch=0)
        saving.save(model, step=2, epoch=0)
        saving.wait()
    args = ["verify", storage.url]
    kind = request.node.callspec.params["storage"]
    if kind != "local":
        options = request.getfixturevalue(f"{kind}_options")
        args += ["--endpoint-url", options["endpoint_url"], "--token", options["token"]]
    intact = run_cli(*args)
    assert intact.returncode == 0, intact
    lines = intact.stdout.splitlines()
    assert lines[0] == "checkpoints/step-000000002.e00000001"
    (shared,) = objects_of(storage)
    assert any(
        line.startswith(f"  ok      {shared}: ") and "3 arrays matching" in line
        for line in lines
    ), lines
    assert "  ok      tensors: all " in intact.stdout
    assert lines[-1] == "intact: checkpoints/step-000000002.e00000001"

    damage_object(storage, tmp_path)
    damaged = run_cli(*args, "--step", "1")
    assert damaged.returncode == 1, damaged
    assert f"  DAMAGED {shared}: " in damaged.stdout
    assert damaged.stdout.splitlines()[-1] == (
        "damaged: checkpoints/step-000000001.e00000001 cannot be restored as it is"
    )
    none = run_cli(*args, "--step", "7")
    assert none.returncode == 3
    assert none.stdout.startswith("no committed checkpoint of step 7 in ")


def test_repair_of_a_drive_index_keeps_the_shared_objects(
    drive_run_dir, drive_options, tmp_path
):
    """The index deleted by hand, rebuilt by ``repair``: the objects stay the run's."""
    from support import run_cli

    from colab_resume.storage.drive import DriveStore
    from colab_resume.storage.store import split_url

    storage = Storage(drive_run_dir, drive_options)
    model = lora_model()
    train(model, 1)
    with manager(storage, tmp_path) as saving:
        saving.save(model, step=1, epoch=0)
        saving.save(model, step=2, epoch=0)
        saving.wait()
    (shared,) = objects_of(storage)
    protocol, root = split_url(drive_run_dir)
    store = DriveStore(drive_run_dir, protocol, root, dict(drive_options))
    store._run_folder(create=True, timeout=10)
    assert store.folder.index_id is not None
    store.api.delete(store.folder.index_id, timeout=10)

    flags = ["--endpoint-url", drive_options["endpoint_url"]]
    flags += ["--token", drive_options["token"]]
    repaired = run_cli("repair", drive_run_dir, *flags)
    assert repaired.returncode == 0, repaired
    assert list(objects_of(Storage(drive_run_dir, drive_options))) == [shared]
    verified = run_cli("verify", drive_run_dir, *flags)
    assert verified.returncode == 0, verified
    expected = variables(model)
    fresh = lora_model(seed=1)
    with manager(Storage(drive_run_dir, drive_options), tmp_path) as reading:
        assert reading.restore(fresh).step == 2
    for want, got in zip(expected, variables(fresh), strict=True):
        assert np.array_equal(want, got)


def test_rebuild_writes_no_frozen_array_and_refuses_another_base_by_name(
    storage, tmp_path
):
    model = lora_model()
    train(model, 2)
    events = EventLog()
    with manager(storage, tmp_path, events=events, frozen="rebuild") as saving:
        saving.save(model, step=2, epoch=0)
        train(model, 1, seed=3)
        saving.save(model, step=3, epoch=0)
        saving.wait()
    assert objects_of(storage) == {}
    assert own_bytes(storage, 2) == own_bytes(storage, 3) < FROZEN_BYTES / 20
    manifest = storage.read_json("checkpoints/step-000000003.e00000001/MANIFEST.json")
    assert manifest["objects"]["files"] == []
    assert sorted(manifest["objects"]["rebuilt"]) == [
        "model/000000",
        "model/000001",
        "model/000002",
    ]
    assert "frozen='rebuild': 3 frozen arrays not written" in (
        events.recent(kind="checkpoint.committed")[-1].message
    )
    expected = variables(model)

    same = lora_model(seed=1)  # build_model() makes the same base
    with manager(storage, tmp_path, frozen="rebuild") as reading:
        assert reading.restore(same).step == 3
    for want, got in zip(expected, variables(same), strict=True):
        assert np.array_equal(want, got)

    other = lora_model(seed=2)  # another preset version, another seed
    with manager(storage, tmp_path, frozen="rebuild") as reading:
        with pytest.raises(FrozenArraysChangedError) as caught:
            reading.restore(other)
    # The kernels differ; the frozen bias is zeros under either seed.
    assert caught.value.differ == ["model/000000", "model/000002"]
    message = str(caught.value)
    assert "model/000000 (sequential" in message and "frozen_proj/kernel" in message
    assert "Make build_model() load the same base" in message
    assert isinstance(caught.value, cr.ColabResumeError)


@pytest.mark.parametrize("mode", ["every", "once"])
def test_a_cadence_past_the_daily_upload_cap_is_warned_about_once(mode, tmp_path):
    """Drive's 750 GB a day, scaled down: the local store is given a cap of
    80 MB a day (a stand-in: no emulator takes 750 GB), and saves come every
    10 minutes by an injected clock. Every array every time is ~76 MB a day
    (95% of it); the trained part only is ~3 MB."""
    storage = Storage(str(tmp_path / "run"))
    storage.store.daily_upload_bytes = 80e6
    now = [0.0]
    events = EventLog()
    model = lora_model()
    train(model, 1)
    with manager(
        storage, tmp_path, events=events, frozen=mode, clock=lambda: now[0]
    ) as saving:
        for step in range(1, 6):
            now[0] += 600.0
            saving.save(model, step=step, epoch=0)
            saving.wait()
    warned = events.recent(kind="checkpoint.upload_cap")
    if mode == "once":
        assert warned == []
        return
    (warning,) = warned
    assert warning.level == "warning"
    assert "at this cadence the run uploads about 0.1 GB a day, 9" in warning.message
    assert "of the store's daily upload cap" in warning.message
    assert "frozen='once' (the default) would upload only what trains" in (
        warning.message
    )


def test_prune_removes_what_a_killed_object_upload_left(tmp_path):
    """A local temporary file in ``objects/``, as a kill mid-upload leaves it."""
    from support import run_cli

    from colab_resume.storage.local import TEMP_PREFIX

    storage = Storage(str(tmp_path / "run"))
    model = lora_model()
    train(model, 1)
    with manager(storage, tmp_path) as saving:
        saving.save(model, step=1, epoch=0)
        saving.wait()
    (shared,) = objects_of(storage)
    left = tmp_path / "run" / OBJECT_DIR / f"{TEMP_PREFIX}killed"
    left.write_bytes(b"half an object")
    pruned = run_cli("prune", storage.url, "--keep", "1")
    assert pruned.returncode == 0, pruned
    assert not left.exists()
    assert list(objects_of(storage)) == [shared]


def tiny_gemma_lora():
    """A two-layer GemmaCausalLM built from config (no preset download),
    ``backbone.enable_lora(4)``, as keras-hub's LoRA guides do."""
    keras_hub = pytest.importorskip(
        "keras_hub", reason="keras-hub is not installed in this virtualenv"
    )
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GemmaBackbone(
        vocabulary_size=64,
        num_layers=2,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=32,
        intermediate_dim=64,
        head_dim=16,
    )
    lm = keras_hub.models.GemmaCausalLM(backbone=backbone, preprocessor=None)
    backbone.enable_lora(4)
    lm.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[],
    )
    return lm


def fit_gemma(lm, seed: int) -> None:
    tokens = np.random.default_rng(seed).integers(1, 64, (4, 8)).astype("int32")
    x = {"token_ids": tokens, "padding_mask": np.ones_like(tokens)}
    lm.fit(x, np.roll(tokens, -1, axis=1), batch_size=2, epochs=1, verbose=0)


def test_a_keras_hub_lora_checkpoint_holds_only_the_lora_part(tmp_path):
    storage = Storage(str(tmp_path / "run"))
    lm = tiny_gemma_lora()
    fit_gemma(lm, 0)
    with manager(storage, tmp_path) as saving:
        saving.save(lm, step=2, epoch=0)
        fit_gemma(lm, 1)
        saving.save(lm, step=4, epoch=0)
        saving.wait()
    manifest = storage.read_json("checkpoints/step-000000004.e00000001/MANIFEST.json")
    stored = set(manifest["objects"]["arrays"])
    names = {
        f"model/{i:06d}": path
        for i, (path, _, _) in enumerate(manifest["structure"]["model"])
    }
    # Everything of the model but the LoRA factors is in the shared object.
    assert {names[t] for t in set(names) - stored} == {
        v.path for v in lm.trainable_variables
    }
    assert all("lora_kernel" in v.path for v in lm.trainable_variables)
    expected = variables(lm)
    fresh = tiny_gemma_lora()
    with manager(storage, tmp_path) as reading:
        assert reading.restore(fresh).step == 4
    for want, got in zip(expected, variables(fresh), strict=True):
        assert np.array_equal(want, got)


def test_a_slow_first_upload_of_the_frozen_arrays_suggests_rebuild(tmp_path):
    """The clock is injected: each reading is 400 s after the last, so the
    first commit (two readings apart) looks slower than 300 s."""
    storage = Storage(str(tmp_path / "run"))
    now = [0.0]

    def clock() -> float:
        now[0] += 400.0
        return now[0]

    events = EventLog()
    model = lora_model()
    train(model, 1)
    with manager(storage, tmp_path, events=events, clock=clock) as saving:
        saving.save(model, step=1, epoch=0)
        saving.save(model, step=2, epoch=0)
        saving.wait()
    (slow,) = events.recent(kind="checkpoint.frozen_slow")
    assert slow.step == 1 and slow.data["estimated"] is False
    assert "frozen='rebuild' writes none of them" in slow.message


def slow_uploads(storage: Storage, monkeypatch, rate: float):
    """A clock on which each file ``storage`` uploads takes its size /
    ``rate`` seconds: a slow store, without waiting for one."""
    now = [0.0]
    lock = threading.Lock()
    put = storage.put_file

    def slow_put(local: str, rel: str, **options) -> None:
        size = os.path.getsize(local)  # before: a local store moves the file
        put(local, rel, **options)
        with lock:
            now[0] += size / rate

    monkeypatch.setattr(storage, "put_file", slow_put)
    return lambda: now[0]


def test_a_long_upload_of_the_frozen_arrays_suggests_rebuild_before_it_starts(
    tmp_path, monkeypatch
):
    """A store said to move 1 kB/s an upload (the local store stands in),
    whose uploads take that long: the frozen arrays' half megabyte would
    take about 9 minutes. The suggestion comes before any object is
    uploaded, and the commit, slower than 5 minutes, does not repeat it."""
    storage = Storage(str(tmp_path / "run"))
    storage.store.upload_stream_bytes_per_second = 1000.0
    clock = slow_uploads(storage, monkeypatch, 1000.0)
    events = EventLog()
    stored_then = []
    events.subscribe(
        lambda e: (
            stored_then.append(objects_of(storage))
            if e.kind == "checkpoint.frozen_slow"
            else None
        )
    )
    model = lora_model()
    train(model, 1)
    with manager(storage, tmp_path, events=events, clock=clock) as saving:
        saving.save(model, step=1, epoch=0)
        saving.save(model, step=2, epoch=0)
        saving.wait()
    (slow,) = events.recent(kind="checkpoint.frozen_slow")
    assert stored_then == [{}]  # before the upload of the objects
    assert slow.step == 1 and slow.data["estimated"] is True
    assert slow.data["estimated_seconds"] == pytest.approx(FROZEN_BYTES / 1e3, 0.05)
    assert "at 1 kB/s (1 at a time, each about 1 kB/s as this store" in slow.message
    assert "frozen='rebuild' writes none of them" in slow.message
    first = events.recent(kind="checkpoint.committed")[0]
    assert first.step == 1 and first.data["seconds"] > 300  # slow after, too


def test_the_estimate_takes_the_rate_this_session_measured_over_the_store_s(
    tmp_path, monkeypatch
):
    """A store said to move 1 GB/s an upload, whose uploads this session
    measured at 1 kB/s (a model with no frozen part saved first): the
    fine-tune's first save suggests "rebuild" at the measured rate."""
    storage = Storage(str(tmp_path / "run"))
    storage.store.upload_stream_bytes_per_second = 1e9
    clock = slow_uploads(storage, monkeypatch, 1000.0)
    events = EventLog()
    plain = keras.Sequential([keras.Input((BASE,)), keras.layers.Dense(BASE)])
    plain.compile(optimizer="sgd", loss="mse")
    model = lora_model()
    train(model, 1)
    with manager(storage, tmp_path, events=events, clock=clock) as saving:
        saving.save(plain, step=1, epoch=0)
        saving.wait()
        assert events.recent(kind="checkpoint.frozen_slow") == []
        saving.save(model, step=2, epoch=0)
        saving.wait()
    (slow,) = events.recent(kind="checkpoint.frozen_slow")
    assert slow.step == 2 and slow.data["estimated"] is True
    assert slow.data["bytes_per_second"] == pytest.approx(1e3)
    assert "at 1 kB/s (as this session's uploads measured)" in slow.message


def test_an_object_deleted_under_a_live_session_is_written_again(storage, tmp_path):
    """Someone deletes ``objects/`` between two saves: the save that would
    reference the missing object does not commit (a warning says why) and
    training is not failed; the next save uploads the object again."""
    model = lora_model()
    train(model, 1)
    events = EventLog()
    with manager(storage, tmp_path, events=events, keep=5) as saving:
        saving.save(model, step=1, epoch=0)
        saving.wait()
        (path,) = objects_of(storage)
        storage.delete(path)
        saving.save(model, step=2, epoch=0)
        saving.wait()
        saving.check()  # not raised on the training thread
        saving.save(model, step=3, epoch=0)
        saving.wait()
        assert [n.step for n in saving.committed()] == [1, 3]
    (missing,) = events.recent(kind="checkpoint.objects_missing")
    assert missing.step == 2 and path.split("/")[1] in missing.message
    assert list(objects_of(storage)) == [path]

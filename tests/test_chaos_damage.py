"""Objects deleted or damaged behind the agent's back (docs/DESIGN.md §4), emulated GCS.

- the heartbeat deleted: the holder writes it again at its next beat;
- its own lease deleted: the holder recreates it, create-only, and keeps
  the run (a newcomer that took the number first fences it instead);
- its own lease overwritten with garbage: it can no longer prove it owns
  the run, so it stops writing (fenced);
- the newest checkpoint's data file deleted or corrupted, or its manifest
  deleted: the next session falls back to the older checkpoint and ends
  bitwise where a clean run ends.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from colab_resume.errors import FencedError
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.heartbeat.lease import read_lease
from colab_resume.protocol import rundir
from colab_resume.protocol.records import BeatRecord, parse
from colab_resume.storage import Storage

BEAT = 0.3


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


@pytest.fixture
def storage(gcs_run_dir, gcs_options) -> Storage:
    return Storage(gcs_run_dir, gcs_options)


def test_deleted_heartbeat_is_rewritten_at_the_next_beat(storage):
    with RunSession.open(storage, SessionOptions(heartbeat_seconds=BEAT)) as session:
        path = rundir.heartbeat_path(session.lease)
        storage.delete(path)
        assert not storage.exists(path)
        wait_for(lambda: storage.exists(path), timeout=5 * BEAT + 2)
        beat = parse(BeatRecord, storage.read_json(path), path)
        assert beat.session_id == session.session_id and beat.beat >= 2


def test_deleted_own_lease_is_recreated_and_the_run_kept(storage):
    with RunSession.open(storage, SessionOptions(heartbeat_seconds=BEAT)) as session:
        path = rundir.lease_path(session.lease)
        storage.delete(path)
        wait_for(lambda: session.events.recent(kind="lease.restored"))
        assert read_lease(storage, session.lease).session_id == session.session_id
        session.fence()  # still the owner: a commit would go ahead
        assert not session.writer.fenced


def test_deleted_lease_taken_by_a_newcomer_fences_the_old_holder(storage):
    """The two-committers hole: a newcomer re-creates the deleted number."""
    old = RunSession.open(storage, SessionOptions(heartbeat_seconds=30.0))
    storage.delete(rundir.lease_path(old.lease))
    # The newcomer sees no lease at all and takes number 1 itself. Its own
    # fence checks only look upward, so the old holder must notice.
    new = RunSession.open(storage, SessionOptions(heartbeat_seconds=30.0))
    assert new.lease == old.lease
    with pytest.raises(FencedError, match="no longer names this session"):
        old.fence()  # what the old holder does before any commit
    assert old.writer.fenced
    new.fence()  # the newcomer owns the run
    old.close()
    new.close()


def test_garbage_own_lease_stops_the_holder_from_writing(storage):
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=BEAT))
    heartbeat = rundir.heartbeat_path(session.lease)
    storage.write_bytes(rundir.lease_path(session.lease), b"\x00not json")
    wait_for(lambda: session.writer.fenced, timeout=5 * BEAT + 2)
    assert session.events.recent(kind="lease.fenced")
    with pytest.raises(FencedError):
        session.check()
    written = storage.info(heartbeat).updated
    time.sleep(3 * BEAT)
    assert storage.info(heartbeat).updated == written  # it writes nothing more
    session.close()


# --- damaged checkpoints, through the real agent (TensorFlow in process) -----

tf = pytest.importorskip("tensorflow", reason="checkpoints are written by TF")
import keras  # noqa: E402

import colab_resume as cr  # noqa: E402

X = np.random.RandomState(0).randn(128, 4).astype("float32")
Y = X.sum(axis=1, keepdims=True)
EPOCHS, STEPS = 2, 16


def build_model() -> keras.Model:
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dropout(0.2)]
        + [keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def make_dataset(epoch: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(128, seed=epoch).batch(8)


def train(run_dir: str, options: dict, *callbacks) -> tuple[cr.Agent, list]:
    keras.utils.set_random_seed(3)
    tf.config.experimental.enable_op_determinism()
    agent = cr.Agent(
        run_dir,
        save_every_steps=4,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        dead_after_seconds=1.5,
        storage_options=options,
        prefer="cpu",
    )
    agent.fit(
        build_model,
        make_dataset,
        epochs=EPOCHS,
        steps_per_epoch=STEPS,
        callbacks=list(callbacks),
        verbose=0,
    )
    weights = [v.numpy() for v in agent.model.variables]
    weights += [v.numpy() for v in agent.model.optimizer.variables]
    return agent, weights


class StopAt(keras.callbacks.Callback):
    def __init__(self, agent_ref: list, batch: int) -> None:
        super().__init__()
        self.agent_ref, self.batch, self.seen = agent_ref, batch, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batch:
            self.agent_ref[0].stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list:
    _, weights = train(str(tmp_path_factory.mktemp("damage-ref") / "run"), {})
    return weights


@pytest.mark.parametrize("damage", ["delete_data", "corrupt_data", "delete_manifest"])
def test_damaged_newest_checkpoint_falls_back_and_ends_bitwise(
    damage, reference, gcs_run_dir, gcs_options, storage
):
    # First session: train to step 12 and stop cleanly (checkpoints 4, 8, 12).
    holder: list = []
    keras.utils.set_random_seed(3)
    agent = cr.Agent(
        gcs_run_dir,
        save_every_steps=4,
        save_every_seconds=None,
        heartbeat_seconds=0.5,
        storage_options=gcs_options,
        prefer="cpu",
        exit_on_preemption=False,  # fit returns after stop(), as in a notebook
    )
    holder.append(agent)
    agent.fit(
        build_model,
        make_dataset,
        epochs=EPOCHS,
        steps_per_epoch=STEPS,
        callbacks=[StopAt(holder, 10)],
        verbose=0,
    )
    newest = agent._loop.checkpoints.committed()[-1]  # internal: the run's manager
    assert newest.step == 10
    files = [o for o in storage.list(newest.path + "/") if "MANIFEST" not in o.path]
    data = max(files, key=lambda o: o.size).path
    if damage == "delete_data":
        storage.delete(data)
    elif damage == "corrupt_data":
        blob = bytearray(storage.read_bytes(data))
        blob[len(blob) // 2] ^= 0xFF  # same size: only the CRC can tell
        storage.write_bytes(data, bytes(blob))
    else:
        storage.delete(newest.manifest_path)
    resumed, weights = train(gcs_run_dir, gcs_options)
    restored = resumed.events.recent(kind="checkpoint.restored")
    assert restored[0].step == 8  # the older checkpoint
    if damage != "delete_manifest":  # a missing manifest is simply no checkpoint
        assert resumed.events.recent(kind="checkpoint.damaged")
    assert all(np.array_equal(a, b) for a, b in zip(reference, weights, strict=True))

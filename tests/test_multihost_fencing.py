"""A stale process 0 of an old slice cannot commit once a new slice started.

The old slice (lease 1) is two real CheckpointManagers with their process
roles, as the agent's two processes hold them, on one local run directory;
TensorFlow state in this process stands in for the replicated model (the
commit rule does not depend on what the files hold). A new slice takes
lease 2. Then the old process 0's next checkpoint is refused by its fence,
and its late manifest — the race where the fence check passed just before
lease 2 was taken — is not committed: no reader restores it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from colab_resume.checkpoint import CheckpointManager
from colab_resume.checkpoint.processes import ProcessRole
from colab_resume.errors import FencedError
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.protocol.listing import RunListing
from colab_resume.protocol.rundir import MANIFEST, CheckpointName
from colab_resume.storage import Storage


def make_state(seed: int) -> dict[str, tf.Variable]:
    rng = np.random.default_rng(seed)
    return {"w": tf.Variable(rng.standard_normal((8, 4)).astype("float32"))}


def managers(
    storage: Storage, lease: int, fence: object, staging: Path
) -> tuple[CheckpointManager, CheckpointManager]:
    return tuple(  # type: ignore[return-value]
        CheckpointManager(
            storage,
            lease=lease,
            fence=fence,  # type: ignore[arg-type]
            events=EventLog(),
            process=ProcessRole(k, 2, wait_seconds=10.0),
            staging_dir=str(staging / f"p{k}"),
        )
        for k in (1, 0)  # the follower's marker first: process 0 waits for it
    )


def save_both(pair: tuple[CheckpointManager, CheckpointManager], step: int) -> None:
    for mgr in pair:
        mgr.save(make_state(step), step=step, epoch=0)
        mgr.wait()
    pair[0].check()  # the follower's part never fails here
    pair[1].check()


def test_a_stale_process_0_is_fenced_and_its_late_manifest_never_restored(
    tmp_path: Path,
) -> None:
    storage = Storage(str(tmp_path / "run"))
    old = RunSession.open(storage, SessionOptions(heartbeat_seconds=60))
    old_pair = managers(storage, 1, old.fence, tmp_path / "old")
    save_both(old_pair, 2)
    assert RunListing.read(storage).committed_step == 2
    manifest_2 = storage.read_json(CheckpointName(step=2, lease=1).manifest_path)
    assert manifest_2["processes"] == 2 and len(manifest_2["markers"]) == 2

    # The new slice starts (the old one looks dead to it, or takeover).
    new = RunSession.open(storage, SessionOptions(heartbeat_seconds=60, takeover=True))
    assert new.lease == 2

    # 1. The old process 0 checks its fence before the manifest: refused.
    with pytest.raises(FencedError):
        save_both(old_pair, 4)
    assert not storage.exists(CheckpointName(step=4, lease=1).manifest_path)

    # 2. The race: its fence check passed just before lease 2 was taken, so
    #    the manifest is written, after lease 2. The commit rule refuses it.
    late = CheckpointName(step=6, lease=1)

    def racing_fence() -> None:  # checks up to the manifest passed; later ones fence
        if storage.exists(late.manifest_path):
            old.fence()

    racing = managers(storage, 1, racing_fence, tmp_path / "racing")
    with pytest.raises(FencedError):  # fenced at the next step: pruning
        save_both(racing, 6)
    assert storage.exists(late.manifest_path)  # it was written...
    listing = RunListing.read(storage)
    assert listing.committed_step == 2  # ...and is not committed
    assert late.dirname not in [d.name.dirname for d in listing.committed]

    # The new slice restores step 2, not the stale step 6.
    new_pair = managers(storage, 2, new.fence, tmp_path / "new")
    state = make_state(0)
    info = new_pair[1].restore(state)
    assert info is not None and info.step == 2
    assert np.array_equal(state["w"].numpy(), make_state(2)["w"].numpy())
    assert MANIFEST in [i.path.rsplit("/", 1)[-1] for i in storage.list(late.path)]
    for mgr in (*old_pair, *racing, *new_pair):
        mgr.close()
    new.close()

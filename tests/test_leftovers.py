"""What a write killed halfway leaves: no listing shows it, retention removes it.

A session preempted while it uploads a checkpoint leaves bytes behind that
are not an object. On Drive that is a file whose name never reached the
run's index: readers never see it (they resolve paths through the index
only), but it counts against the owner's quota, 15 GB on a free account,
for good unless something deletes it. Locally it is a record's temporary
file. The writer (tests/workers/killed_writer.py) is SIGKILLed for real,
at the commit point of its last write, which it reaches and announces
before waiting: the kill lands there every time, not only when a timing
draw happens to fall inside an upload.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from support import run_cli, worker

from colab_resume.checkpoint import CheckpointManager
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.protocol.rundir import CHECKPOINT_DIR, CheckpointName
from colab_resume.storage import Storage, drive_proof
from colab_resume.storage.drive import DriveStore

DEAD = CheckpointName(step=3, lease=1)  # killed during its first file
HALF = CheckpointName(step=5, lease=1)  # killed during its second file


def kill_at_the_commit_point(run_dir: str, options: dict, *rels: str) -> None:
    """Write ``rels``, the last one up to its commit point, and SIGKILL there."""
    flags = []
    if options:
        flags = ["--endpoint", options["endpoint_url"], "--token", options["token"]]
    with worker("killed_writer", run_dir, *rels, *flags) as writer:
        writer.expect("AT THE COMMIT POINT", timeout=60)
        writer.kill()
        assert writer.popen.returncode == -9


def files_in_the_folder(storage: Storage) -> set[str]:
    """Every file's name in a Drive run folder, named in the index or not."""
    store = storage.store
    assert isinstance(store, DriveStore)
    folder = store._run_folder(create=False, timeout=10)
    found = store.api.children(f"'{folder}' in parents", "id,name", timeout=10)
    return {raw["name"] for raw in found}


def checkpoint_dirs(paths: set[str]) -> set[str]:
    return {p.split("/")[1] for p in paths if p.startswith(CHECKPOINT_DIR + "/")}


@pytest.fixture(params=["local", "gdrive"])
def run(request, tmp_path) -> tuple[str, dict]:
    """A run directory and its storage options, on each store that leaves leftovers."""
    if request.param == "local":
        return str(tmp_path / "run"), {}
    return (
        request.getfixturevalue("drive_run_dir"),
        request.getfixturevalue("drive_options"),
    )


def test_a_killed_sessions_leftovers_are_invisible_and_the_next_session_removes_them(
    run, tmp_path
) -> None:
    run_dir, options = run
    kill_at_the_commit_point(run_dir, options, f"{DEAD.path}/ckpt.data")
    kill_at_the_commit_point(
        run_dir, options, f"{HALF.path}/ckpt.index", f"{HALF.path}/ckpt.data"
    )
    storage = Storage(run_dir, options)
    # Readers see only the file that landed; the two killed writes are
    # leftovers, and the directory of the first holds nothing else.
    assert [o.path for o in storage.list(CHECKPOINT_DIR)] == [f"{HALF.path}/ckpt.index"]
    leftovers = storage.leftovers(CHECKPOINT_DIR)
    assert [p.rsplit("/", 1)[0] for p in leftovers] == [DEAD.path, HALF.path]
    if run_dir.startswith("gdrive://"):
        assert set(leftovers) == {f"{DEAD.path}/ckpt.data", f"{HALF.path}/ckpt.data"}

    # The next session's first upload clears the dead session's leftovers.
    manager = CheckpointManager(
        storage,
        lease=2,
        fence=lambda: None,
        events=EventLog(),
        keep=1,
        staging_dir=str(tmp_path / "staging"),
    )
    state = {"w": tf.Variable(np.arange(8, dtype="float32"))}
    manager.save(state, step=10, epoch=0)
    manager.wait()
    manager.check()
    manager.close()
    assert storage.leftovers(CHECKPOINT_DIR) == []
    assert checkpoint_dirs({o.path for o in storage.list("")}) == {
        "step-000000010.e00000002"
    }
    if run_dir.startswith("gdrive://"):
        assert checkpoint_dirs(files_in_the_folder(storage)) == {
            "step-000000010.e00000002"
        }
    else:
        assert sorted((tmp_path / "run" / CHECKPOINT_DIR).iterdir()) == [
            tmp_path / "run" / CHECKPOINT_DIR / "step-000000010.e00000002"
        ]


def test_prune_from_the_cli_removes_a_dead_sessions_leftovers_and_spares_the_holders(
    drive_run_dir, drive_options
) -> None:
    """The live holder's upload in flight is planted through the Drive API (a
    file uploaded, not yet claimed): the state a real upload is in for the
    length of one request, which no kill could hold still for the check."""
    storage = Storage(drive_run_dir, drive_options)
    RunSession.open(storage, SessionOptions(heartbeat_seconds=5)).close()  # lease 1
    kill_at_the_commit_point(drive_run_dir, drive_options, f"{DEAD.path}/ckpt.data")
    kill_at_the_commit_point(
        drive_run_dir,
        drive_options,
        f"{HALF.path}/ckpt.index",
        f"{HALF.path}/ckpt.data",
    )
    live = RunSession.open(storage, SessionOptions(heartbeat_seconds=5))  # lease 2
    in_flight = CheckpointName(step=9, lease=2)
    store = storage.store
    assert isinstance(store, DriveStore)
    folder = store._run_folder(create=False, timeout=10)
    rel = f"{in_flight.path}/ckpt.data"
    assert store.folder.run_id is not None
    # What the live holder's own upload carries: the run's proof.
    metadata = {
        "name": rel,
        "parents": [folder],
        "appProperties": drive_proof.stamp(store.folder.run_id, rel),
    }
    store.api.create(metadata, b"uploading", None, timeout=10)
    try:
        flags = ["--endpoint-url", drive_options["endpoint_url"]]
        flags += ["--token", drive_options["token"]]
        dry = run_cli("prune", drive_run_dir, "--keep", "1", "--dry-run", *flags)
        assert dry.returncode == 0, dry.stderr
        assert "would delete 2 checkpoint directories" in dry.stdout, dry.stdout
        assert len(storage.leftovers(CHECKPOINT_DIR)) == 3  # nothing deleted

        pruned = run_cli("prune", drive_run_dir, "--keep", "1", *flags)
        assert pruned.returncode == 0, pruned.stderr
        assert checkpoint_dirs(files_in_the_folder(storage)) == {in_flight.dirname}
    finally:
        live.close()

"""Keras under a 2-replica MirroredStrategy, saved and restored across processes.

Each TensorFlow process costs a few seconds to start, so there are four:
save + restore for the bitwise round trip, and save-then-SIGKILL + restore
for death in the middle of an upload.
"""

from __future__ import annotations

import json

from support import Process, assert_bitwise_equal, wait_for
from support import worker as start_worker
from support.checkpoints import is_data_file

from colab_resume.protocol.rundir import MANIFEST, CheckpointName
from colab_resume.storage import Storage


def worker(
    mode: str, run_dir: str, endpoint: str, out: object, units: int = 32
) -> Process:
    args = (mode, run_dir, endpoint, str(out), str(units))
    return start_worker("checkpoint_worker", *args)


def finish(proc: Process, timeout: float = 120) -> None:
    proc.finish(expect_rc=0, timeout=timeout)


def assert_state_equal(expected_path: object, actual_path: object) -> None:
    # Keras's Dropout seed generator state and Adam's slots are in there.
    assert_bitwise_equal(str(expected_path), str(actual_path), must_contain=["opt_"])


def test_keras_mirrored_round_trip_is_bitwise(gcs_run_dir, emulator, tmp_path):
    finish(worker("save", gcs_run_dir, emulator.url, tmp_path))
    finish(worker("restore", gcs_run_dir, emulator.url, tmp_path))
    assert_state_equal(tmp_path / "state-3.npz", tmp_path / "restored.npz")
    info = json.loads((tmp_path / "restored.json").read_text())
    assert info["step"] == 3 and info["metrics"] == {"loss": 1.5}
    assert info["extras"] == {"k": [1]}


def test_sigkill_during_upload_restores_previous_commit(
    gcs_run_dir, gcs_options, emulator, tmp_path
):
    storage = Storage(gcs_run_dir, gcs_options)
    second = CheckpointName(step=2, lease=1)
    # ~24 MB of variables in 1 MiB shards, uploaded one at a time.
    proc = worker("save-kill", gcs_run_dir, emulator.url, tmp_path, units=2400)
    with proc:
        wait_for(
            lambda: any(is_data_file(i.path) for i in storage.list(second.path)),
            120,
            "the second checkpoint's upload to start",
            interval=0.02,
            unless=proc.exited_early,
        )
        proc.kill()  # SIGKILL
    left = [i.path for i in storage.list(second.path)]
    assert left and not any(n.endswith(MANIFEST) for n in left), (
        "the kill came too late to test anything: the manifest was written"
    )
    finish(worker("restore", gcs_run_dir, emulator.url, tmp_path, units=2400))
    assert json.loads((tmp_path / "restored.json").read_text())["step"] == 1
    assert_state_equal(tmp_path / "state-1.npz", tmp_path / "restored.npz")

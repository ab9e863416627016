"""Keras under a 2-replica MirroredStrategy, saved and restored across processes.

Each TensorFlow process costs a few seconds to start, so there are four:
save + restore for the bitwise round trip, and save-then-SIGKILL + restore
for death in the middle of an upload.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from colab_resume.rundir import MANIFEST, CheckpointName
from colab_resume.storage import Storage

pytestmark = [pytest.mark.emulator, pytest.mark.tf]

WORKER = os.path.join(os.path.dirname(__file__), "checkpoint_worker.py")


def worker(mode, run_dir, endpoint, out, units=32, **popen):
    args = [sys.executable, WORKER, mode, run_dir, endpoint, str(out), str(units)]
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def finish(proc, timeout=120) -> None:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed:\n{out}\n{err[-4000:]}"


def assert_bitwise_equal(expected_path, actual_path) -> None:
    expected, actual = np.load(expected_path), np.load(actual_path)
    assert sorted(expected.files) == sorted(actual.files)
    # Keras's Dropout seed generator state and Adam's slots are in there.
    assert any(k.startswith("opt_") for k in expected.files)
    for key in expected.files:
        assert expected[key].dtype == actual[key].dtype, key
        assert np.array_equal(expected[key], actual[key]), key


def test_keras_mirrored_round_trip_is_bitwise(gcs_run_dir, emulator, tmp_path):
    finish(worker("save", gcs_run_dir, emulator.url, tmp_path))
    finish(worker("restore", gcs_run_dir, emulator.url, tmp_path))
    assert_bitwise_equal(tmp_path / "state-3.npz", tmp_path / "restored.npz")
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
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            names = [i.path for i in storage.list(second.path)]
            if any(".data-" in n for n in names):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        else:
            pytest.fail("the second checkpoint's upload never started")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = [i.path for i in storage.list(second.path)]
    assert left and not any(n.endswith(MANIFEST) for n in left), (
        "the kill came too late to test anything: the manifest was written"
    )
    finish(worker("restore", gcs_run_dir, emulator.url, tmp_path, units=2400))
    assert json.loads((tmp_path / "restored.json").read_text())["step"] == 1
    assert_bitwise_equal(tmp_path / "state-1.npz", tmp_path / "restored.npz")

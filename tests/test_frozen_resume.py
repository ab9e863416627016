"""A LoRA fine-tune killed mid-epoch resumes bitwise, in both ``frozen`` modes.

``tests/workers/lora_worker.py`` trains a model with a frozen base (a
``trainable = False`` Dense and a LoRA-enabled Dense whose kernel is frozen)
through ``Agent.fit``; it is SIGKILLed in the middle of its second epoch
and run again. The final variables, optimizer slots and Dropout's seed
state included, must be bitwise those of an uninterrupted run; with
``frozen="once"`` every checkpoint holds only the trained part and the
frozen base is one shared object, uploaded once for the whole run.
"""

from __future__ import annotations

import pytest
from support import assert_bitwise_equal, run_worker

from colab_resume.protocol.objects import OBJECT_DIR
from colab_resume.storage import Storage

WIDTH = 128
FROZEN_BYTES = 2 * WIDTH * WIDTH * 4  # the two frozen kernels


def train(run_dir: str, out: str, *args: str, endpoint: str | None = None, rc=0):
    extra = ("--endpoint", endpoint) if endpoint else ()
    return run_worker("lora_worker", run_dir, out, *args, *extra, expect_rc=rc)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:
    """An uninterrupted run (frozen="every": the mode does not change training)."""
    base = tmp_path_factory.mktemp("reference")
    out = str(base / "weights.npz")
    done = train(str(base / "run"), out, "--frozen", "every")
    assert done.last("DONE") == "DONE steps_here=24"
    return out


def checkpoint_bytes(storage: Storage) -> dict[str, int]:
    """Checkpoint directory -> bytes of its files, manifest aside."""
    sizes: dict[str, int] = {}
    for info in storage.list("checkpoints/"):
        directory, name = info.path.split("/")[1:]
        if name != "MANIFEST.json":
            sizes[directory] = sizes.get(directory, 0) + info.size
    return sizes


def test_once_killed_mid_epoch_resumes_bitwise_saving_the_base_once(
    reference, gcs_run_dir, gcs_options, emulator, tmp_path
):
    out = str(tmp_path / "w.npz")
    killed = train(
        gcs_run_dir, out, "--kill-at-step", "13", endpoint=emulator.url, rc=-9
    )
    assert "KILLING at step 13" in killed.stdout
    storage = Storage(gcs_run_dir, gcs_options)
    (shared,) = storage.list(OBJECT_DIR + "/")
    resumed = train(gcs_run_dir, out, endpoint=emulator.url)
    assert resumed.last("DONE") in ("DONE steps_here=12", "DONE steps_here=15")
    assert_bitwise_equal(reference, out, must_contain=["seed_generator"])
    # The resumed session found the base stored: not uploaded again.
    (after,) = storage.list(OBJECT_DIR + "/")
    assert (after.path, after.size, after.updated) == (
        shared.path,
        shared.size,
        shared.updated,
    )
    assert FROZEN_BYTES < after.size < FROZEN_BYTES + (64 << 10)
    sizes = checkpoint_bytes(storage)
    assert sizes  # retention kept the newest few, from both sessions
    for directory, size in sizes.items():
        assert size < FROZEN_BYTES / 10, (directory, size)
        manifest = storage.read_json(f"checkpoints/{directory}/MANIFEST.json")
        assert [f["name"] for f in manifest["objects"]["files"]] == [
            after.path.split("/")[1]
        ]


def test_every_killed_mid_epoch_resumes_bitwise_saving_the_base_each_time(
    reference, tmp_path
):
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "w.npz")
    train(run_dir, out, "--frozen", "every", "--kill-at-step", "13", rc=-9)
    train(run_dir, out, "--frozen", "every")
    assert_bitwise_equal(reference, out, must_contain=["seed_generator"])
    storage = Storage(run_dir)
    assert storage.list(OBJECT_DIR + "/") == []
    for directory, size in checkpoint_bytes(storage).items():
        assert size > FROZEN_BYTES, (directory, size)


def test_rebuild_killed_mid_epoch_resumes_bitwise_and_refuses_another_base(
    reference, tmp_path
):
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "w.npz")
    train(run_dir, out, "--frozen", "rebuild", "--kill-at-step", "13", rc=-9)
    storage = Storage(run_dir)
    committed = storage.list("checkpoints/")
    # Another base: refused by name before any training, nothing written.
    refused = train(run_dir, out, "--frozen", "rebuild", "--base-seed", "12", rc=1)
    assert "FrozenArraysChangedError" in refused.stderr, refused.stderr[-3000:]
    assert "model/000000" in refused.stderr
    assert "Make build_model() load the same base" in refused.stderr
    assert storage.list("checkpoints/") == committed
    train(run_dir, out, "--frozen", "rebuild")
    assert_bitwise_equal(reference, out, must_contain=["seed_generator"])
    assert storage.list(OBJECT_DIR + "/") == []
    sizes = checkpoint_bytes(storage)
    assert sizes and all(size < FROZEN_BYTES / 10 for size in sizes.values()), sizes

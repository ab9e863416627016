"""A LoRA fine-tune on JAX, killed mid-epoch, resumes bitwise; its base is stored once.

``tests/workers/lora_worker.py`` (the same worker as the TensorFlow suite's
``tests/test_frozen_resume.py``) on Keras' JAX backend, with no TensorFlow
installed: an uninterrupted run, and one SIGKILLed in its second epoch and
run again, in both ``frozen`` modes, on a local run directory. The final
variables must be bitwise equal; with ``frozen="once"`` every checkpoint
holds only the trained part and the frozen base is one object.
"""

from __future__ import annotations

import pytest
from support import assert_bitwise_equal, run_worker

from colab_resume.protocol.objects import OBJECT_DIR
from colab_resume.storage import Storage

WIDTH = 128
FROZEN_BYTES = 2 * WIDTH * WIDTH * 4  # the two frozen kernels


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("reference")
    out = str(base / "weights.npz")
    done = run_worker("lora_worker", str(base / "run"), out, "--frozen", "every")
    assert done.last("DONE") == "DONE steps_here=24"
    return out


@pytest.mark.parametrize("mode", ["once", "every"])
def test_killed_mid_epoch_resumes_bitwise(reference: str, mode: str, tmp_path) -> None:
    run_dir, out = str(tmp_path / "run"), str(tmp_path / "w.npz")
    killed = run_worker(
        "lora_worker",
        run_dir,
        out,
        "--frozen",
        mode,
        "--kill-at-step",
        "13",
        expect_rc=-9,
    )
    assert "KILLING at step 13" in killed.stdout
    run_worker("lora_worker", run_dir, out, "--frozen", mode)
    assert_bitwise_equal(reference, out, must_contain=["seed_generator"])
    storage = Storage(run_dir)
    shared = storage.list(OBJECT_DIR + "/")
    sizes: dict[str, int] = {}
    for info in storage.list("checkpoints/"):
        directory, name = info.path.split("/")[1:]
        if name != "MANIFEST.json":
            sizes[directory] = sizes.get(directory, 0) + info.size
    assert sizes
    if mode == "once":
        assert len(shared) == 1 and shared[0].size > FROZEN_BYTES
        assert all(size < FROZEN_BYTES / 10 for size in sizes.values()), sizes
    else:
        assert shared == []
        assert all(size > FROZEN_BYTES for size in sizes.values()), sizes

"""GPU strategy selection, with a mock of TensorFlow's device API.

No GPU exists where these tests run (and this TensorFlow has no CUDA), so
``FakeTF`` mocks the few ``tf.config`` / ``tf.distribute`` calls the GPU
path makes. The real-TensorFlow GPU checks (CUDA build missing) are in
``test_runtime_tpu.py``.
"""

from __future__ import annotations

import types

import pytest

from colab_resume.backend.tf_devices import GPUInfo, gpu_strategy
from colab_resume.runtime import (
    AcceleratorNotFoundError,
    GPUSupportMissingError,
    detect,
)
from colab_resume.runtime.diagnose import gpu_not_visible_error
from colab_resume.runtime.precision import describe_choice, resolve_precision


class FakeTF:
    """A mock of tf.config/tf.distribute for N GPUs (no GPU exists here)."""

    def __init__(self, names: list[str], capability=(7, 5)):
        ids = range(len(names))
        physical = [
            types.SimpleNamespace(name=f"/physical_device:GPU:{i}") for i in ids
        ]
        logical = [types.SimpleNamespace(name=f"/device:GPU:{i}") for i in ids]
        details = {
            d.name: {"device_name": n, "compute_capability": capability}
            for d, n in zip(physical, names, strict=True)
        }
        self.made: list[tuple[str, object]] = []

        def strategy(kind):
            return lambda devices: self.made.append((kind, devices)) or kind

        self.config = types.SimpleNamespace(
            list_physical_devices=lambda kind: physical if kind == "GPU" else [],
            list_logical_devices=lambda kind: logical if kind == "GPU" else [],
            experimental=types.SimpleNamespace(
                get_device_details=lambda device: details[device.name]
            ),
        )
        self.distribute = types.SimpleNamespace(
            OneDeviceStrategy=strategy("one"),
            MirroredStrategy=strategy("mirrored"),
            get_strategy=lambda: "default",
        )


def test_one_gpu_gets_the_default_strategy():
    """Mock TensorFlow (no GPU exists here): one GPU -> TensorFlow's default
    strategy (it places everything on that GPU), no OneDeviceStrategy."""
    tf = FakeTF(["Tesla T4"])
    strategy, gpus = gpu_strategy(tf)
    assert strategy == "default" and tf.made == []
    assert gpus == (GPUInfo("Tesla T4", (7, 5)),)


def test_several_gpus_get_mirrored_strategy():
    """Mock TensorFlow (no GPU exists here): all visible GPUs are mirrored."""
    tf = FakeTF(["NVIDIA A100", "NVIDIA A100"], capability=(8, 0))
    strategy, gpus = gpu_strategy(tf)
    assert strategy == "mirrored"
    assert tf.made == [("mirrored", ["/device:GPU:0", "/device:GPU:1"])]
    assert [g.compute_capability for g in gpus] == [(8, 0), (8, 0)]


def test_no_gpu_visible():
    """Mock TensorFlow (no GPU exists here): none visible -> clear error."""
    with pytest.raises(AcceleratorNotFoundError, match="CUDA_VISIBLE_DEVICES"):
        gpu_strategy(FakeTF([]))


@pytest.mark.parametrize(
    "precision, kind, policy",
    [
        ("auto", "tpu", "mixed_bfloat16"),
        ("auto", "gpu", "float32"),  # mixed_float16 needs loss scaling: opt in
        ("auto", "cpu", "float32"),
        ("mixed_float16", "gpu", "mixed_float16"),
        ("float32", "tpu", "float32"),
    ],
)
def test_resolve_precision(precision, kind, policy):
    assert resolve_precision(precision, kind) == policy


@pytest.mark.parametrize(
    "precision, users, policy, says",
    [
        ("auto", "mixed_float16", "mixed_float16", "'auto' keeps"),
        ("mixed_float16", "mixed_float16", "mixed_float16", None),
        ("float32", "mixed_float16", "float32", "replaces"),
        ("auto", None, "float32", None),
    ],
)
def test_describe_choice_speaks_only_when_the_policy_changes(
    precision, users, policy, says
):
    assert resolve_precision(precision, "gpu", users) == policy
    line = describe_choice(precision, "gpu", users, policy)
    assert (line is None) if says is None else (says in line)


def test_cuda_build_that_sees_no_gpu_says_how_to_get_the_libraries(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").touch()
    info = detect(
        {"COLAB_GPU": "1"}, root=str(tmp_path), module_available=lambda name: False
    )
    error = gpu_not_visible_error(types.SimpleNamespace(__version__="2.99.0"), info)
    message = str(error)
    assert isinstance(error, GPUSupportMissingError)
    assert "/dev/nvidiactl, COLAB_GPU=1" in message
    assert "pip install 'tensorflow[and-cuda]==2.99.0'" in message

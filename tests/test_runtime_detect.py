"""Runtime detection, describe() and the VM's age, on injected machines.

Each machine is a real directory tree standing in for ``/`` (device files,
``/proc/driver/nvidia``) plus an environment dict: detection reads nothing
else, so these are the same inputs a real Colab or Cloud TPU VM gives it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from colab_resume.runtime import Connection, describe, detect, vm_age
from colab_resume.runtime.detect import estimated_tpu_replicas
from colab_resume.runtime.host import host_memory_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COLAB_TPU_VM_ENV = {
    "COLAB_RELEASE_TAG": "release-colab_20250101-060000_RC00",
    "COLAB_TPU_1VM": "1",
    "TPU_ACCELERATOR_TYPE": "v5e-1",
    "TPU_WORKER_ID": "0",
    "TPU_WORKER_HOSTNAMES": "localhost",
}


def machine(tmp_path, *files: str, contents: dict[str, str] | None = None) -> str:
    """A fake filesystem root holding ``files`` (absolute paths inside it)."""
    for path in files:
        full = tmp_path / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.touch()
    for path, text in (contents or {}).items():
        full = tmp_path / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    return str(tmp_path)


def only(*modules: str):
    return lambda name: name in modules


def test_colab_tpu_vm(tmp_path):
    root = machine(tmp_path, "/dev/vfio/0", "/dev/vfio/vfio")
    info = detect(COLAB_TPU_VM_ENV, root=root, module_available=only("libtpu"))
    assert info.kind == "tpu_vm"
    assert info.is_tpu and info.in_colab and info.libtpu
    assert info.tpu_target == "local" and not info.tpu_remote
    assert info.accelerator_type == "v5e-1"
    # /dev/vfio/vfio is the VFIO control node, not a TPU chip.
    assert info.tpu_devices == ("/dev/vfio/0",)
    assert "COLAB_TPU_1VM=1" in info.evidence and "/dev/vfio/0" in info.evidence


def test_colab_tpu_vm_is_local_even_with_a_tpu_name(tmp_path):
    env = {**COLAB_TPU_VM_ENV, "TPU_NAME": "some-name"}
    info = detect(env, root=str(tmp_path), module_available=only())
    assert info.tpu_target == "local" and not info.tpu_remote


def test_gcp_tpu_vm_named(tmp_path):
    root = machine(tmp_path, "/dev/accel0", "/dev/accel1", "/dev/accel2", "/dev/accel3")
    env = {"TPU_NAME": "my-tpu", "TPU_ACCELERATOR_TYPE": "v4-8"}
    info = detect(env, root=root, module_available=only("libtpu"))
    assert info.kind == "tpu_vm" and not info.in_colab
    assert info.tpu_target == "my-tpu" and info.tpu_remote
    assert info.tpu_devices == tuple(f"/dev/accel{i}" for i in range(4))


def test_tpu_name_local_means_attached(tmp_path):
    info = detect({"TPU_NAME": "local"}, root=str(tmp_path), module_available=only())
    assert info.kind == "tpu_vm" and info.tpu_target == "local" and not info.tpu_remote


def test_tpu_device_files_alone_mean_a_tpu_vm(tmp_path):
    root = machine(tmp_path, "/dev/accel0")
    info = detect({}, root=root, module_available=only())
    assert info.kind == "tpu_vm" and info.tpu_target == "local"


def test_legacy_tpu_node(tmp_path):
    env = {"COLAB_RELEASE_TAG": "x", "COLAB_TPU_ADDR": "10.0.0.2:8470"}
    info = detect(env, root=str(tmp_path), module_available=only())
    assert info.kind == "tpu_node"
    assert info.tpu_target == "grpc://10.0.0.2:8470" and info.tpu_remote
    assert info.evidence == ("COLAB_TPU_ADDR=10.0.0.2:8470",)


def test_gpu(tmp_path):
    root = machine(
        tmp_path,
        "/dev/nvidiactl",
        contents={
            "/proc/driver/nvidia/gpus/0000:00:04.0/information": (
                "Model: \t\t Tesla T4\nIRQ:   36\n"
            )
        },
    )
    info = detect({"COLAB_GPU": "1"}, root=root, module_available=only("google.colab"))
    assert info.kind == "gpu" and info.gpu_runtime and info.in_colab
    assert info.gpu_names == ("Tesla T4",)
    assert info.evidence == ("/dev/nvidiactl", "COLAB_GPU=1")
    assert info.tpu_target is None


def test_libtpu_alone_is_not_a_tpu(tmp_path):
    # pip install jax[tpu] on a laptop installs libtpu; that is no TPU.
    info = detect({}, root=str(tmp_path), module_available=only("libtpu"))
    assert info.kind == "cpu" and info.libtpu


def test_nothing(tmp_path):
    info = detect({}, root=str(tmp_path), module_available=only())
    assert info.kind == "cpu"
    assert not (info.is_tpu or info.in_colab or info.gpu_runtime or info.libtpu)
    assert info.evidence == () and info.tpu_target is None


def test_tpu_wins_over_gpu(tmp_path):
    root = machine(tmp_path, "/dev/nvidiactl", "/dev/accel0")
    assert detect({}, root=root, module_available=only()).kind == "tpu_vm"


@pytest.mark.parametrize(
    "accelerator_type, replicas",
    [("v2-8", 8), ("v3-8", 8), ("v4-8", 4), ("v5p-8", 4), ("v5e-1", 1),
     ("v5litepod-4", 4), ("v6e-8", 8), (None, None), ("weird", None)],
)  # fmt: skip
def test_estimated_tpu_replicas(accelerator_type, replicas):
    assert estimated_tpu_replicas(accelerator_type) == replicas


def test_describe_tpu_before_and_after_connect(tmp_path):
    info = detect(COLAB_TPU_VM_ENV, root=str(tmp_path), module_available=only())
    summary = describe(info)
    assert summary["kind"] == "tpu_vm" and summary["in_colab"] is True
    assert summary["chip_type"] == "v5e-1" and summary["replicas"] == 1
    assert summary["tensorflow"]  # installed here, read from package metadata
    assert summary["host_memory_bytes"] > 0
    connected = Connection(
        kind="tpu", replicas=4, precision="mixed_bfloat16", chip_type="v5e-4"
    )
    summary = describe(info, connection=connected)
    assert (summary["kind"], summary["replicas"], summary["chip_type"]) == (
        "tpu",
        4,
        "v5e-4",
    )


def test_describe_gpu_counts_driver_gpus(tmp_path):
    gpus = {
        f"/proc/driver/nvidia/gpus/0000:00:0{i}.0/information": "Model: NVIDIA L4\n"
        for i in (4, 5)
    }
    root = machine(tmp_path, "/dev/nvidiactl", contents=gpus)
    summary = describe(detect({}, root=root, module_available=only()))
    assert summary["chip_type"] == "NVIDIA L4" and summary["replicas"] == 2


def fake_proc(tmp_path, *, pid1_start_ticks=None, btime=None, uptime=None):
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    if pid1_start_ticks is not None:
        # Field 22 is starttime; the name contains spaces and a ')' on purpose.
        fields = ["S"] + ["0"] * 18 + [str(pid1_start_ticks), "4096", "100"]
        (proc / "1" / "stat").write_text("1 (my (init) x) " + " ".join(fields) + "\n")
    if btime is not None:
        (proc / "stat").write_text(f"cpu  1 2 3\nbtime {btime}\nprocesses 9\n")
    if uptime is not None:
        (proc / "uptime").write_text(f"{uptime} 12.00\n")
    (proc / "meminfo").write_text("MemTotal:       13290192 kB\nMemFree: 1 kB\n")
    return str(proc)


def test_vm_age_from_pid1_start(tmp_path):
    # Host booted at 1000 s, container's PID 1 started 500 s later (50000
    # ticks at 100 Hz); the host's uptime (9000 s) must not be used.
    proc = fake_proc(tmp_path, pid1_start_ticks=50_000, btime=1000, uptime=9000.0)
    age = vm_age(proc_root=proc, clock=lambda: 1000 + 500 + 42.5, ticks_per_second=100)
    assert age is not None
    assert age.source == "pid1" and age.seconds == pytest.approx(42.5)


def test_vm_age_falls_back_to_uptime(tmp_path):
    proc = fake_proc(tmp_path, uptime=321.5)
    age = vm_age(proc_root=proc, clock=lambda: 0.0, ticks_per_second=100)
    assert age is not None and (age.source, age.seconds) == ("uptime", 321.5)


def test_vm_age_unknown(tmp_path):
    assert vm_age(proc_root=str(tmp_path / "nothing")) is None


def test_vm_age_on_this_machine_is_pid1_and_plausible():
    age = vm_age()
    assert age is not None and age.source == "pid1"
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    # The container cannot be older than the kernel it runs on.
    assert 0 <= age.seconds <= uptime + 5


def test_host_memory(tmp_path):
    assert host_memory_bytes(proc_root=fake_proc(tmp_path)) == 13290192 * 1024


def test_importing_and_detecting_does_not_import_tensorflow():
    code = (
        "import sys\n"
        "import colab_resume.runtime as r\n"
        "r.detect(); r.describe(); r.vm_age()\n"
        "r.is_accelerator_loss(RuntimeError('Socket closed'))\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
        "assert 'keras' not in sys.modules, 'keras was imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr

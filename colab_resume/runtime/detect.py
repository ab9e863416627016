"""Where are we running, and which accelerator is attached? No TensorFlow.

Detection reads environment variables, device files and installed module
names only: it has no side effects and never imports TensorFlow, because on
a TPU machine importing TensorFlow takes the TPU (libtpu's lock) and costs
seconds. Everything it reads is injectable (``env``, ``root``,
``module_available``) so tests can describe any machine.

The signs, as Colab and Cloud TPU set them:

- Colab: ``COLAB_RELEASE_TAG`` is set, or ``google.colab`` is importable.
- Colab TPU VM: ``COLAB_TPU_1VM=1``, ``TPU_ACCELERATOR_TYPE`` (``v5e-1``),
  ``TPU_WORKER_HOSTNAMES=localhost``; chips are ``/dev/accel*`` (v2-v4) or
  ``/dev/vfio/<n>`` (v5 and later); ``libtpu`` is installed.
- Cloud TPU VM on GCP: ``TPU_NAME`` names the TPU.
- Legacy TPU node (retired): ``COLAB_TPU_ADDR=ip:8470``, a remote worker.
- GPU: ``/dev/nvidiactl`` exists (Colab also sets ``COLAB_GPU=1``).
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from colab_resume.runtime import host

TPU_VM = "tpu_vm"
TPU_NODE = "tpu_node"
GPU = "gpu"
CPU = "cpu"

# TF treats these resolver targets as "directly attached, no cluster".
LOCAL_TPU_TARGETS = ("", "local")


@dataclasses.dataclass(frozen=True)
class RuntimeInfo:
    """What detection found.

    Attributes:
        kind: ``"tpu_vm"``, ``"tpu_node"``, ``"gpu"`` or ``"cpu"``.
        in_colab: running inside a Colab runtime.
        tpu_target: the ``TPUClusterResolver(tpu=...)`` argument for this
            machine (``"local"``, ``"grpc://ip:8470"`` or a TPU name), or None.
        tpu_remote: the TPU is reached over the network, so TensorFlow must
            first connect to the cluster (legacy node, named Cloud TPU).
        accelerator_type: e.g. ``"v5e-1"``, ``"v2-8"``, when known.
        tpu_devices: TPU device files found (``/dev/accel0``, ``/dev/vfio/0``).
        libtpu: the ``libtpu`` module is installed.
        gpu_runtime: an NVIDIA driver is present (``/dev/nvidiactl`` or
            ``COLAB_GPU=1``), whether or not TensorFlow can use it.
        gpu_names: GPU models reported by the driver, one per GPU.
        evidence: the signs that decided ``kind``, for messages.
    """

    kind: str
    in_colab: bool = False
    tpu_target: str | None = None
    tpu_remote: bool = False
    accelerator_type: str | None = None
    tpu_devices: tuple[str, ...] = ()
    libtpu: bool = False
    gpu_runtime: bool = False
    gpu_names: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()

    @property
    def is_tpu(self) -> bool:
        return self.kind in (TPU_VM, TPU_NODE)

    @property
    def signs(self) -> str:
        """The evidence as one phrase, e.g. ``"COLAB_TPU_1VM=1, /dev/vfio/0"``."""
        return ", ".join(self.evidence) or "no accelerator signs"


def _module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _gpu_names(root: str) -> tuple[str, ...]:
    names = []
    pattern = _under(root, "/proc/driver/nvidia/gpus/*/information")
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        match = re.search(r"^Model:\s*(.+)$", text, re.MULTILINE)
        names.append(match.group(1).strip() if match else "NVIDIA GPU")
    return tuple(names)


def _tpu_device_files(root: str) -> tuple[str, ...]:
    found = glob.glob(_under(root, "/dev/accel*"))
    # /dev/vfio/vfio is the VFIO control node present on many hosts; only the
    # numbered groups are devices (v5 and later TPU chips).
    found += [
        p
        for p in glob.glob(_under(root, "/dev/vfio/*"))
        if os.path.basename(p).isdigit()
    ]
    prefix = _under(root, "/")
    return tuple(sorted("/" + p[len(prefix) :].lstrip("/") for p in found))


def in_colab(
    env: Mapping[str, str] | None = None,
    module_available: Callable[[str], bool] | None = None,
) -> bool:
    """Whether this is a Colab runtime (see the module's rules)."""
    env = os.environ if env is None else env
    available = module_available or _module_available
    return bool(env.get("COLAB_RELEASE_TAG")) or available("google.colab")


def detect(
    env: Mapping[str, str] | None = None,
    *,
    root: str = "/",
    module_available: Callable[[str], bool] | None = None,
) -> RuntimeInfo:
    """Describe this machine's accelerator without importing TensorFlow.

    Args:
        env: environment variables; defaults to ``os.environ``.
        root: filesystem root under which ``/dev`` and ``/proc/driver`` are
            looked up; tests pass a temporary directory.
        module_available: tells whether a module could be imported, without
            importing it; defaults to ``importlib.util.find_spec``.

    Returns:
        The detected runtime. A TPU wins over a GPU, a GPU over the CPU.
    """
    env = os.environ if env is None else env
    available = module_available or _module_available
    colab = in_colab(env, available)
    libtpu = available("libtpu")
    tpu_devices = _tpu_device_files(root)
    gpu_ctl = os.path.exists(_under(root, "/dev/nvidiactl"))
    gpu_runtime = gpu_ctl or env.get("COLAB_GPU") == "1"
    accelerator_type = env.get("TPU_ACCELERATOR_TYPE") or None
    common: dict[str, Any] = {
        "in_colab": colab,
        "libtpu": libtpu,
        "tpu_devices": tpu_devices,
        "gpu_runtime": gpu_runtime,
        "gpu_names": _gpu_names(root),
        "accelerator_type": accelerator_type,
    }

    node_address = env.get("COLAB_TPU_ADDR")
    if node_address:
        return RuntimeInfo(
            kind=TPU_NODE,
            tpu_target="grpc://" + node_address,
            tpu_remote=True,
            evidence=(f"COLAB_TPU_ADDR={node_address}",),
            **common,
        )

    evidence = [
        f"{name}={env[name]}"
        for name in ("COLAB_TPU_1VM", "TPU_ACCELERATOR_TYPE", "TPU_NAME")
        if env.get(name)
    ]
    evidence += list(tpu_devices)
    if evidence:
        if libtpu:
            evidence.append("libtpu installed")
        tpu_name = env.get("TPU_NAME", "")
        # On Colab, or without a TPU name, the chips are attached to this VM.
        # A name on GCP is resolved through the Cloud TPU API to its workers'
        # addresses, which TensorFlow treats as a remote cluster.
        named = bool(tpu_name) and not colab and tpu_name not in LOCAL_TPU_TARGETS
        return RuntimeInfo(
            kind=TPU_VM,
            tpu_target=tpu_name if named else "local",
            tpu_remote=named,
            evidence=tuple(evidence),
            **common,
        )

    if gpu_runtime:
        gpu_evidence = ["/dev/nvidiactl"] if gpu_ctl else []
        if env.get("COLAB_GPU") == "1":
            gpu_evidence.append("COLAB_GPU=1")
        return RuntimeInfo(kind=GPU, evidence=tuple(gpu_evidence), **common)

    return RuntimeInfo(kind=CPU, **common)


def estimated_tpu_replicas(accelerator_type: str | None) -> int | None:
    """TPU devices TensorFlow will see for an accelerator type, before connecting.

    The number in ``v2-8``/``v3-8``/``v4-8``/``v5p-8`` counts TensorCores; v4
    and v5p fuse a chip's two cores into one device ("megacore"). For v5e and
    v6e the number counts chips, one device each.
    """
    if not accelerator_type:
        return None
    match = re.fullmatch(r"(v\d+[a-z]*)-(\d+)", accelerator_type)
    if not match:
        return None
    generation, count = match.group(1), int(match.group(2))
    return count // 2 if generation in ("v4", "v5p") else count


def describe(
    info: RuntimeInfo | None = None,
    *,
    connection: Any = None,
    proc_root: str = "/proc",
) -> dict[str, Any]:
    """A JSON-able summary of the runtime for the panel, logs and bug reports.

    Args:
        info: detection result; detected now if None.
        connection: a :class:`colab_resume.runtime.Connection`, if connected;
            its replica count and chip type replace the estimates.
        proc_root: where procfs is mounted.

    Returns:
        ``kind``, ``in_colab``, ``chip_type``, ``replicas``, ``tensorflow``,
        ``libtpu``, ``host_memory_bytes``, ``vm_age_seconds``,
        ``vm_age_source`` and ``evidence``.
    """
    info = detect() if info is None else info
    if info.is_tpu:
        chip, replicas = (
            info.accelerator_type,
            estimated_tpu_replicas(info.accelerator_type),
        )
    elif info.kind == GPU:
        chip = info.gpu_names[0] if info.gpu_names else "NVIDIA GPU"
        replicas = len(info.gpu_names) or None
    else:
        chip, replicas = "cpu", 1
    if connection is not None:
        chip, replicas = connection.chip_type, connection.replicas
    libtpu = host.installed_version(*host.LIBTPU_DISTRIBUTIONS)
    age = host.vm_age(proc_root=proc_root)
    return {
        "kind": info.kind if connection is None else connection.kind,
        "in_colab": info.in_colab,
        "chip_type": chip,
        "replicas": replicas,
        "tensorflow": host.tensorflow_version(),
        "libtpu": libtpu[1] if libtpu else None,
        "host_memory_bytes": host.host_memory_bytes(proc_root=proc_root),
        "vm_age_seconds": age.seconds if age else None,
        "vm_age_source": age.source if age else None,
        "evidence": list(info.evidence),
    }

"""Strategies on GPUs and the CPU, with real TensorFlow.

GPU: TensorFlow's default strategy for one GPU, ``MirroredStrategy`` over
all visible GPUs otherwise.

CPU: TensorFlow's default strategy (``OneDeviceStrategy("/cpu:0")``
where a GPU is visible too), or with ``cpu_replicas=N`` a
``MirroredStrategy`` over N logical CPU devices — a rehearsal of
multi-replica (TPU) code on a laptop or in CI. Logical devices are a
process-wide setting that TensorFlow accepts only before it initialises its
devices (before the first op). Afterwards the existing split is used if it
already has N devices; otherwise the only ways out are calling ``connect``
before any TensorFlow op, or a fresh process.

Why the default strategy on one device, not ``OneDeviceStrategy``: the
latter wraps every batch in a distributed iterator and every step in its
``run``, measured at 0.4 to 0.9 ms a step on the CPU here (a small model's
whole step is about 1 ms); the default strategy places everything on the one
device TensorFlow picks (its GPU, else the CPU) and costs nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from colab_resume.runtime.errors import AcceleratorNotFoundError, LogicalDevicesError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class GPUInfo:
    """One GPU as TensorFlow reports it.

    Attributes:
        name: model name, e.g. ``"NVIDIA A100-SXM4-40GB"``.
        compute_capability: ``(major, minor)``, or None if not reported.
    """

    name: str
    compute_capability: tuple[int, int] | None


def gpu_details(tf: Any) -> tuple[GPUInfo, ...]:
    """The GPUs TensorFlow can see, with names and compute capabilities.

    Lists physical devices only, so logical devices can still be configured
    afterwards.
    """
    found = []
    for device in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(device)
        except Exception:  # details are decoration; never fail on them
            details = {}
        capability = details.get("compute_capability")
        found.append(
            GPUInfo(
                name=str(details.get("device_name") or device.name),
                compute_capability=tuple(capability) if capability else None,
            )
        )
    return tuple(found)


def gpu_strategy(tf: Any) -> tuple[Any, tuple[GPUInfo, ...]]:
    """A strategy over every visible GPU.

    Raises:
        AcceleratorNotFoundError: TensorFlow sees no GPU.
    """
    gpus = gpu_details(tf)
    if not gpus:
        raise AcceleratorNotFoundError(
            "TensorFlow sees no GPU (tf.config.list_physical_devices('GPU') is "
            "empty). Choose a GPU runtime (Colab: Runtime > Change runtime type), "
            "check that CUDA_VISIBLE_DEVICES does not hide it, or pass "
            "prefer='auto' to fall back to the CPU."
        )
    names = [d.name for d in tf.config.list_logical_devices("GPU")]
    if len(names) == 1:
        return one_device(tf), gpus
    return tf.distribute.MirroredStrategy(names), gpus


def one_device(tf: Any) -> Any:
    """TensorFlow's default strategy: one device, no distribution wrappers."""
    return tf.distribute.get_strategy()


def is_default(strategy: Any) -> bool:
    """Whether ``strategy`` is TensorFlow's default one (a private class)."""
    return type(strategy).__name__.startswith("_Default")


def _logical_cpus(tf: Any) -> list[str]:
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def cpu_strategy(tf: Any, replicas: int) -> Any:
    """The default strategy on the CPU, or ``MirroredStrategy`` over N logical CPUs.

    Raises:
        LogicalDevicesError: TensorFlow already initialised its devices with
            a different number of logical CPUs.
    """
    if replicas == 1:
        if tf.config.list_physical_devices("GPU"):
            # prefer="cpu" beside a GPU: the default would place it there.
            return tf.distribute.OneDeviceStrategy("/cpu:0")
        return one_device(tf)
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
        )
    except RuntimeError as exc:
        # TensorFlow refuses once its devices are initialised; the split that
        # exists then is final for this process.
        existing = _logical_cpus(tf)
        if len(existing) != replicas:
            raise LogicalDevicesError(
                f"Cannot split the CPU into cpu_replicas={replicas} logical "
                f"devices: TensorFlow already initialised its devices with "
                f"{len(existing)} ({exc}). Call connect() before any TensorFlow "
                f"op (creating a tensor, a model or a dataset initialises them), "
                f"or restart the Python process/runtime and connect first."
            ) from exc
        log.info("reusing the existing %d logical CPU devices", replicas)
    names = _logical_cpus(tf)
    if len(names) != replicas:
        raise LogicalDevicesError(
            f"Asked TensorFlow for {replicas} logical CPU devices but it shows "
            f"{len(names)}: {names}. Restart the Python process and call "
            f"connect(cpu_replicas={replicas}) before any TensorFlow op."
        )
    return tf.distribute.MirroredStrategy(names)

"""Facts about the host that need no TensorFlow: VM age, memory, versions.

VM age, for Colab's ~12 h runtime limit, is measured from the start of
PID 1, not from ``/proc/uptime``. ``/proc/uptime`` counts from the boot of
the kernel, and a notebook runtime is a container: its kernel is the
host's, which may have booted days before this runtime was handed out.
PID 1 is the first process of *this* container, so its start time
approximates when the runtime was created. ``/proc/uptime`` is only the
fallback when PID 1's start cannot be read.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import sys
import time
from collections.abc import Callable

from colab_resume import procfs

# Distribution names TensorFlow is shipped under, most specific first.
TENSORFLOW_DISTRIBUTIONS = (
    "tensorflow-tpu",
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-macos",
    "tf-nightly-tpu",
    "tf-nightly",
    "tf-nightly-cpu",
)
LIBTPU_DISTRIBUTIONS = ("libtpu", "libtpu-nightly")


@dataclasses.dataclass(frozen=True)
class VMAge:
    """How long this runtime has existed.

    Attributes:
        seconds: age in seconds.
        source: ``"pid1"`` (start of PID 1, i.e. the container) or
            ``"uptime"`` (``/proc/uptime``, the kernel's; may be the host's).
    """

    seconds: float
    source: str


def _pid1_start_epoch(proc_root: str, ticks_per_second: float) -> float | None:
    pid1 = procfs.stat(1, proc_root=proc_root)
    booted = procfs.boot_time(proc_root=proc_root)
    if pid1 is None or booted is None:
        return None
    return booted + pid1.start_ticks / ticks_per_second


def vm_age(
    *,
    proc_root: str = "/proc",
    clock: Callable[[], float] = time.time,
    ticks_per_second: float | None = None,
) -> VMAge | None:
    """How long this runtime has been up, for the ~12 h limit on Colab.

    Args:
        proc_root: where procfs is mounted (injectable for tests).
        clock: wall clock in seconds since the epoch.
        ticks_per_second: the kernel's clock tick (``SC_CLK_TCK``).

    Returns:
        The age and where it came from, or None if neither source is readable.
    """
    if ticks_per_second is None:
        ticks_per_second = float(os.sysconf("SC_CLK_TCK"))
    started = _pid1_start_epoch(proc_root, ticks_per_second)
    if started is not None:
        return VMAge(max(0.0, clock() - started), "pid1")
    uptime = procfs.read_text(os.path.join(proc_root, "uptime"))
    try:
        return VMAge(float(uptime.split()[0]), "uptime")  # type: ignore[union-attr]
    except (AttributeError, ValueError, IndexError):
        return None


def host_memory_bytes(*, proc_root: str = "/proc") -> int | None:
    """Total memory of this machine from ``/proc/meminfo``, or None."""
    meminfo = procfs.read_text(os.path.join(proc_root, "meminfo")) or ""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            try:
                return int(parts[1]) * 1024  # reported in kB
            except (IndexError, ValueError):
                return None
    return None


def installed_version(*distributions: str) -> tuple[str, str] | None:
    """The first installed distribution of ``distributions`` and its version.

    Reads package metadata only, so nothing is imported.
    """
    for name in distributions:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def tensorflow_version() -> str | None:
    """TensorFlow's version, without importing it unless it already is."""
    tf = sys.modules.get("tensorflow")
    version = getattr(tf, "__version__", None)
    if version:
        return str(version)
    found = installed_version(*TENSORFLOW_DISTRIBUTIONS)
    return found[1] if found else None

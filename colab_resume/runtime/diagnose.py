"""Turn TensorFlow's connection failures into errors that say the fix.

A user on a fresh Colab TPU runtime who sees "No OpKernel was registered to
support Op 'ConfigureDistributedTPU'" needs one pip command and a restart,
not a traceback. Each function here recognises one known failure and builds
the matching :mod:`colab_resume.runtime.errors` exception, whose message
names the cause and the exact fix.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

from colab_resume.runtime import host
from colab_resume.runtime.detect import RuntimeInfo
from colab_resume.runtime.errors import (
    AcceleratorError,
    AcceleratorNotFoundError,
    GPUSupportMissingError,
    TPUInUseError,
    TPUNameRequiredError,
    TPUSupportMissingError,
)
from colab_resume.runtime.loss import exception_chain

# libtpu's single-owner lock (one process per TPU host).
LIBTPU_LOCK_PATH = "/tmp/libtpu_lockfile"
# Where pip finds the libtpu wheels matching tensorflow-tpu releases.
LIBTPU_TF_RELEASES = "https://storage.googleapis.com/libtpu-tf-releases/index.html"
RESTART = "restart the runtime (Colab: Runtime > Restart session) and run again"

_NO_TPU_KERNELS = ("configuredistributedtpu", "tpus not found in the cluster")
_TPU_NAME = "please provide a tpu name"
_TPU_IN_USE = (
    "tpu is already in use",
    "libtpu multi-process lockfile",
    "libtpu.so already in use",
)


def tpu_install_command(tf_version: str | None) -> str:
    """The pip command that installs TensorFlow's TPU build of ``tf_version``."""
    pin = f"=={tf_version}" if tf_version else ""
    return f"pip install tensorflow-tpu{pin} --find-links={LIBTPU_TF_RELEASES}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    # TensorFlow appends node attributes that only bury the searchable part.
    return line.split(" used by {{node", 1)[0]


def _chain_text(exc: BaseException) -> str:
    return "\n".join(str(link) for link in exception_chain(exc)).lower()


# --- who holds the TPU --------------------------------------------------------


def _pids_from_proc_locks(lock_path: str, proc_root: str) -> set[int]:
    """Processes holding a POSIX lock on ``lock_path`` (libtpu uses lockf)."""
    try:
        st = os.stat(lock_path)
        with open(os.path.join(proc_root, "locks"), encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = set()
    for line in lines:
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 1234 00:2d:5678 0 EOF"; waiters have "->".
        if len(fields) >= 6 and "->" not in fields and fields[5] == inode:
            if fields[4].isdigit():
                pids.add(int(fields[4]))
    return pids


def _pids_with_open_file(paths: set[str], proc_root: str) -> set[int]:
    """Processes with an open descriptor on any of ``paths`` (like ``lsof``)."""
    pids: set[int] = set()
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc_root, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or another user's process
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in paths:
                pids.add(int(entry))
                break
    return pids


def tpu_lock_holders(
    lock_path: str = LIBTPU_LOCK_PATH,
    *,
    proc_root: str = "/proc",
    device_files: tuple[str, ...] = (),
    exclude: tuple[int, ...] | None = None,
) -> tuple[int, ...]:
    """The other processes that hold libtpu's lock file or the TPU devices.

    Args:
        lock_path: libtpu's lock file.
        proc_root: where procfs is mounted.
        device_files: TPU device files (``/dev/accel0``...) to look for too.
        exclude: pids to ignore; default: this process.

    Returns:
        Sorted pids; empty if none (or if other users' processes are hidden).
    """
    exclude = (os.getpid(),) if exclude is None else exclude
    paths = {lock_path, os.path.realpath(lock_path), *device_files}
    pids = _pids_from_proc_locks(lock_path, proc_root)
    pids |= _pids_with_open_file(paths, proc_root)
    return tuple(sorted(pid for pid in pids if pid not in exclude))


def _command_line(pid: int, proc_root: str) -> str:
    try:
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def tpu_in_use_error(
    pids: tuple[int, ...],
    *,
    lock_path: str = LIBTPU_LOCK_PATH,
    proc_root: str = "/proc",
    cause: str | None = None,
) -> TPUInUseError:
    """The error for a TPU held by other processes, naming them."""
    if pids:
        who = ", ".join(
            f"pid {pid}"
            + (f" ({cmd})" if (cmd := _command_line(pid, proc_root)) else "")
            for pid in pids
        )
        kill = "kill " + " ".join(str(p) for p in pids)
    else:
        who = "another process (its pid is not visible to this user)"
        kill = f"sudo lsof -w {lock_path} /dev/accel0 /dev/vfio/0 to find it"
    said = f' TensorFlow said: "{cause}".' if cause else ""
    return TPUInUseError(
        f"The TPU is already in use by {who}. Only one process may use a TPU: "
        f"libtpu locks {lock_path}.{said} In a notebook the holder is often the "
        f"notebook kernel itself, after it imported TensorFlow or JAX, which locks "
        f"out a `!python train.py` child. Fix: train in that one process, or stop "
        f"the holder ({kill}, or restart the runtime). If no process holds it any "
        f"more, remove the stale lock: rm {lock_path}",
        pids,
    )


# --- TensorFlow builds -----------------------------------------------------------


def tpu_support_missing_error(
    info: RuntimeInfo, cause: BaseException | str
) -> TPUSupportMissingError:
    """The error for a TPU machine whose TensorFlow has no TPU kernels."""
    version = host.tensorflow_version()
    said = cause if isinstance(cause, str) else _first_line(cause)
    return TPUSupportMissingError(
        f"This is a TPU machine ({info.signs}) but TensorFlow {version or '?'} "
        f'cannot drive the TPU: "{said}". Colab\'s TPU runtimes do not ship '
        f"TensorFlow, and the plain tensorflow package has no TPU kernels. Install "
        f"the TPU build of the same version, then {RESTART}: "
        f"{tpu_install_command(version)} . If pip finds no such tensorflow-tpu "
        f"version, install a version it offers for both packages: pip install "
        f"tensorflow==X tensorflow-tpu==X --find-links={LIBTPU_TF_RELEASES}"
    )


def tpu_name_required_error(cause: BaseException) -> TPUNameRequiredError:
    """The error for ``TPUClusterResolver`` asking for a TPU name."""
    return TPUNameRequiredError(
        f'TPUClusterResolver could not tell which TPU to use: "{_first_line(cause)}". '
        f"On a TPU VM (every Colab TPU runtime, and Cloud TPU VMs) the chips are "
        f'attached to this machine: pass tpu="local" (connect(tpu="local"), or '
        f'TPUClusterResolver(tpu="local") in your own code). For a Cloud TPU '
        f'reached over the network, pass its name (tpu="my-tpu") or set TPU_NAME.'
    )


def diagnose_tpu_failure(
    exc: BaseException,
    info: RuntimeInfo,
    *,
    lock_path: str = LIBTPU_LOCK_PATH,
    proc_root: str = "/proc",
) -> AcceleratorError | None:
    """Our error explaining ``exc`` from connecting to a TPU, or None if unknown.

    Another process holding the TPU is checked first: TensorFlow then often
    reports no TPU at all, which would otherwise read as a missing package.
    """
    text = _chain_text(exc)
    in_use = any(fragment in text for fragment in _TPU_IN_USE)
    no_kernels = any(fragment in text for fragment in _NO_TPU_KERNELS)
    if in_use or (no_kernels and not info.tpu_remote):
        pids = tpu_lock_holders(
            lock_path, proc_root=proc_root, device_files=info.tpu_devices
        )
        if not pids and in_use:
            match = re.search(r"process with pid (\d+)", text)
            pids = (int(match.group(1)),) if match else ()
        if pids or in_use:
            return tpu_in_use_error(
                pids, lock_path=lock_path, proc_root=proc_root, cause=_first_line(exc)
            )
    if no_kernels:
        return tpu_support_missing_error(info, exc)
    if _TPU_NAME in text:
        return tpu_name_required_error(exc)
    return None


def check_gpu_build(tf: Any, info: RuntimeInfo) -> None:
    """Fail clearly if this machine has a GPU but TensorFlow lacks CUDA.

    Raises:
        GPUSupportMissingError: ``tf.test.is_built_with_cuda()`` is False on
            a machine with an NVIDIA driver.
    """
    if not info.gpu_runtime or tf.test.is_built_with_cuda():
        return
    found = host.installed_version(*host.TENSORFLOW_DISTRIBUTIONS)
    dist, version = found if found else ("tensorflow", getattr(tf, "__version__", ""))
    uninstall = f"pip uninstall -y {dist} && " if dist != "tensorflow" else ""
    pin = f"=={version}" if version else ""
    raise GPUSupportMissingError(
        f"This machine has an NVIDIA GPU ({info.signs}) but the installed "
        f"TensorFlow {version} (package {dist}) was built without CUDA "
        f"(tf.test.is_built_with_cuda() is False), so it can only use the CPU. "
        f"Install the CUDA build, then {RESTART}: "
        f"{uninstall}pip install 'tensorflow[and-cuda]{pin}'"
    )


def gpu_not_visible_error(tf: Any, info: RuntimeInfo) -> GPUSupportMissingError:
    """The error for a CUDA build of TensorFlow that sees no GPU on a GPU machine."""
    version = getattr(tf, "__version__", "")
    pin = f"=={version}" if version else ""
    return GPUSupportMissingError(
        f"This machine has an NVIDIA GPU ({info.signs}) but TensorFlow {version} "
        f"sees none (tf.config.list_physical_devices('GPU') is empty). Usually its "
        f"CUDA libraries are missing or do not match the driver, or "
        f"CUDA_VISIBLE_DEVICES hides the GPU. Install TensorFlow with its CUDA "
        f"libraries, then {RESTART}: pip install 'tensorflow[and-cuda]{pin}' "
        f"(and check that nvidia-smi lists the GPU)."
    )


def jax_tpu_unusable_error(
    info: RuntimeInfo,
    got: str,
    *,
    lock_path: str = LIBTPU_LOCK_PATH,
    proc_root: str = "/proc",
) -> AcceleratorError:
    """Why JAX, on a machine with a TPU, sees only ``got`` devices.

    The TPU held by another process (libtpu's lock, naming the pid) or a JAX
    without libtpu; JAX itself only logs a warning and uses the CPU.
    """
    holders = tpu_lock_holders(lock_path, proc_root=proc_root)
    if holders:
        return tpu_in_use_error(holders, lock_path=lock_path, proc_root=proc_root)
    if importlib.util.find_spec("libtpu") is None:
        return TPUSupportMissingError(
            f"This machine has a TPU ({info.signs}), but JAX has no TPU support "
            f"(libtpu is not installed) and would train on the {got.upper()}. "
            f"On Colab's TPU runtime use the preinstalled jax; elsewhere: pip "
            f"install 'jax[tpu]'. Or pass prefer='{got}' to train on the "
            f"{got.upper()} on purpose."
        )
    return AcceleratorNotFoundError(
        f"This machine has a TPU ({info.signs}), but JAX sees only {got.upper()} "
        f"devices. Restart the runtime (another process may have held the TPU "
        f"when JAX started), or pass prefer='{got}' to train on the "
        f"{got.upper()} on purpose."
    )

"""What Linux's ``/proc`` says about processes and the boot, without TensorFlow.

Two parts of the package read it: the VM's age (:mod:`colab_resume.runtime.host`)
and the proof that a lease holder's process is gone
(:mod:`colab_resume.heartbeat.process`). Every reader takes ``proc_root`` so
tests can point it at a directory of their own, and answers None where
``/proc`` is missing or unreadable (macOS, Windows, a sandbox): callers then
fall back to what they did without it.
"""

from __future__ import annotations

import dataclasses
import os
import re

PROC = "/proc"
_NAMESPACE_LINK = re.compile(r"pid:\[(\d+)\]")


@dataclasses.dataclass(frozen=True)
class ProcStat:
    """The two fields of ``/proc/<pid>/stat`` we use.

    Attributes:
        state: one letter: ``R`` running, ``S`` sleeping, ``Z`` zombie...
        start_ticks: when the process started, in clock ticks since boot
            (field 22). With the pid it names one process for the whole
            boot: a reused pid has a later start.
    """

    state: str
    start_ticks: int


def read_text(path: str) -> str | None:
    """A small procfs file's text, or None if it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def stat(pid: int | str, *, proc_root: str = PROC) -> ProcStat | None:
    """``/proc/<pid>/stat``'s state and start time; None if there is no such process."""
    text = read_text(os.path.join(proc_root, str(pid), "stat"))
    if text is None:
        return None
    # The command name (field 2) may hold spaces and parentheses; the fields
    # after the last ')' start at field 3, so starttime (22) is index 19.
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return ProcStat(state=fields[0], start_ticks=int(fields[19]))
    except (IndexError, ValueError):
        return None


def started_at(pid: int | str = "self", *, proc_root: str = PROC) -> float | None:
    """When process ``pid`` started, seconds since the epoch, or None."""
    process, booted = stat(pid, proc_root=proc_root), boot_time(proc_root=proc_root)
    if process is None or booted is None:
        return None
    return booted + process.start_ticks / os.sysconf("SC_CLK_TCK")


def boot_id(*, proc_root: str = PROC) -> str | None:
    """The kernel's random id for this boot (a UUID), or None."""
    text = read_text(os.path.join(proc_root, "sys", "kernel", "random", "boot_id"))
    return text.strip() if text else None


def own_pid_namespace(*, proc_root: str = PROC) -> int | None:
    """The inode of this process's pid namespace, or None.

    None also when ``proc_root`` shows another pid namespace's processes (a
    container given its host's ``/proc``): there ``/proc/<pid>`` would name
    someone else's process, and pids read through it prove nothing.
    """
    try:
        if os.readlink(os.path.join(proc_root, "self")) != str(os.getpid()):
            return None
        link = os.readlink(os.path.join(proc_root, "self", "ns", "pid"))
    except OSError:
        return None
    found = _NAMESPACE_LINK.fullmatch(link)
    return int(found.group(1)) if found else None


def boot_time(*, proc_root: str = PROC) -> float | None:
    """When the kernel booted, seconds since the epoch (``btime``), or None."""
    text = read_text(os.path.join(proc_root, "stat")) or ""
    for line in text.splitlines():
        if line.startswith("btime "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None

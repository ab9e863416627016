"""Proof of death on the same host: is the lease holder's process gone?

From another machine a dead holder and a slow network look alike, so the
heartbeat rule waits for ``dead_after_seconds`` of silence. On the holder's
own machine there is proof: its process runs or it does not. The commonest
deaths in a notebook are of that kind — the kernel killed for memory,
restarted after a package install, interrupted hard — and the rerun comes
up on the same VM, where waiting is pure loss.

A lease names its holder's process exactly (:class:`ProcessIdentity`):

- ``boot_id``: the kernel's random id for this boot; another machine, or
  this one rebooted, has another;
- ``pid_namespace``: the inode of the pid namespace. Containers on one
  kernel share its boot id, but a pid means nothing outside its own
  namespace, so sessions in different namespaces never judge each other by
  pid; ``host`` (the hostname) must match too;
- ``pid`` and ``start_ticks``: the process, and when it started in clock
  ticks since boot. A pid reused by a later process has a later start.

A reader in the same pid space (host, boot, namespace) looks the pid up.
No such process, one with another start time, or a zombie (killed, not
yet reaped) proves the holder gone: the run can be taken at once. The
holder's own pid and start mean it still runs, and the heartbeat rule
applies as anywhere else. Whatever cannot be read proves nothing: without
``/proc`` (macOS, Windows) leases carry no identity and only the
heartbeat rule is used.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import socket

from colab_resume import procfs
from colab_resume.protocol.records import LeaseRecord

# States of /proc/<pid>/stat that run no code: zombie, dead.
FINISHED_STATES = ("Z", "X", "x")


@dataclasses.dataclass(frozen=True)
class ProcessIdentity:
    """One process, named so that no other process on any machine matches.

    Attributes:
        host: the hostname.
        boot_id: the kernel's id for this boot.
        pid_namespace: inode of the process's pid namespace.
        pid: the process id, within that namespace.
        start_ticks: when it started, clock ticks since boot.
    """

    host: str
    boot_id: str
    pid_namespace: int
    pid: int
    start_ticks: int

    def shares_pids_with(self, other: ProcessIdentity) -> bool:
        """Whether a pid of ``other``'s means the same process here."""
        return (self.host, self.boot_id, self.pid_namespace) == (
            other.host,
            other.boot_id,
            other.pid_namespace,
        )


def this_process(*, proc_root: str = procfs.PROC) -> ProcessIdentity | None:
    """This process's identity, or None where ``/proc`` cannot give all of it."""
    pid = os.getpid()
    boot = procfs.boot_id(proc_root=proc_root)
    namespace = procfs.own_pid_namespace(proc_root=proc_root)
    own = procfs.stat(pid, proc_root=proc_root)
    if boot is None or namespace is None or own is None:
        return None
    return ProcessIdentity(socket.gethostname(), boot, namespace, pid, own.start_ticks)


def holder_of(lease: LeaseRecord) -> ProcessIdentity | None:
    """The identity a lease records; None for leases without one (older
    versions, holders without ``/proc``)."""
    if lease.boot_id is None or lease.pid_namespace is None:
        return None
    if lease.start_ticks is None:
        return None
    return ProcessIdentity(
        lease.host, lease.boot_id, lease.pid_namespace, lease.pid, lease.start_ticks
    )


def proof_of_death(
    lease: LeaseRecord | None,
    here: ProcessIdentity | None,
    *,
    proc_root: str = procfs.PROC,
) -> str | None:
    """Why ``lease``'s holder provably no longer runs, judged from ``here``.

    Args:
        lease: the holder's lease (None: unreadable, nothing to prove).
        here: the reader's own identity (:func:`this_process`).
        proc_root: where procfs is mounted.

    Returns:
        One line for the verdict, e.g. "holder process 1234 on this host is
        gone"; None when the holder runs, or nothing can be proven from here
        (another host, boot or pid namespace; no identity recorded).
    """
    holder = holder_of(lease) if lease is not None else None
    if holder is None or here is None or not here.shares_pids_with(holder):
        return None
    if holder.pid <= 0:  # not a process: signal 0 to it would reach a group
        return None
    gone = f"holder process {holder.pid} on this host is gone"
    found = procfs.stat(holder.pid, proc_root=proc_root)
    if found is None:
        return gone if not _exists(holder.pid) else None
    if found.start_ticks != holder.start_ticks:
        return f"{gone} (pid {holder.pid} is now another process)"
    if found.state in FINISHED_STATES:
        return f"{gone} (killed; a zombie not yet reaped by its parent)"
    return None


def _exists(pid: int) -> bool:
    """Whether ``pid`` exists, for when its ``/proc`` entry cannot be read.

    A ``/proc`` mounted with ``hidepid`` hides other users' processes; the
    kernel still answers signal 0 (EPERM: exists, not ours), so a hidden
    live holder is never taken for a dead one.
    """
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno != errno.ESRCH
    return True

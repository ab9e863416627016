"""JAX's multi-process runtime: one process per host, one global device mesh.

Keras 3's multi-host path is JAX (``keras.distribution`` over
``jax.distributed``): the same script runs on every host, each process calls
``jax.distributed.initialize`` once, and ``jax.devices()`` then lists every
host's devices. :func:`resolve` finds the cluster from explicit arguments,
Keras' ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` / ``_NUM_PROCESSES`` /
``_PROCESS_ID``, or a Cloud TPU pod slice (``TPU_WORKER_HOSTNAMES`` naming
several hosts: JAX detects the rest itself); :func:`start` initialises it
once per process.

The small collectives the agent needs (agreeing on a number, sharing the
lease, the preemption sync point) are here too, so nothing above the
backend imports JAX. Nothing here imports JAX at module import time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import os
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from colab_resume import exit_status
from colab_resume.data.grain import Shards
from colab_resume.validate import check_seconds

KERAS_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
KERAS_NUM_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
KERAS_PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"
TPU_HOSTS = "TPU_WORKER_HOSTNAMES"


# How each process's make_dataset yields its data: "global": every process
# yields the global batches and the agent feeds each its rows; "per_process":
# each yields only its own rows (per-host files, jax.process_index()).
DATA_SHARDINGS = ("global", "per_process")


class ClusterError(ValueError):
    """The multi-process settings are incomplete, or the processes disagree."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistributedOptions:
    """How (and whether) the agent starts JAX's multi-process runtime.

    Attributes:
        distributed: True: start it (from the arguments below, else the
            environment); False: never; None: start it when the environment
            describes several processes (the Keras variables, or a Cloud TPU
            pod slice).
        coordinator_address: ``host:port`` of process 0's coordinator.
        num_processes: processes in the job.
        process_id: this process's index, ``0 .. num_processes - 1``.
        peer_dead_after_seconds: a peer whose per-process heartbeat has not
            moved for this long is dead: the survivors exit with
            ``exit_status.RESTART``.
        start_timeout_seconds: how long a process waits at start for the
            others to join before it gives up with a message naming what
            it waited for (JAX's own wait ends in an abort).
        data_sharding: ``"global"``: every process's ``make_dataset``
            yields the global batches and each process is fed its rows;
            ``"per_process"``: each yields only this process's rows, fed as
            they are (the processes' shapes are checked equal).
    """

    distributed: bool | None = None
    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    peer_dead_after_seconds: float = 30.0
    start_timeout_seconds: float = 300.0
    data_sharding: str = "global"

    def __post_init__(self) -> None:
        if self.data_sharding not in DATA_SHARDINGS:
            raise ValueError(
                f"data_sharding must be 'global' (make_dataset yields the global "
                f"batches; each process is fed its rows) or 'per_process' (it "
                f"yields this process's rows only), got {self.data_sharding!r}."
            )
        if self.distributed not in (None, True, False):
            raise ValueError(
                f"distributed must be True, False or None, got {self.distributed!r}."
            )
        check_seconds("peer_dead_after_seconds", self.peer_dead_after_seconds)
        check_seconds("start_timeout_seconds", self.start_timeout_seconds)
        given = (self.coordinator_address, self.num_processes, self.process_id)
        if any(v is not None for v in given) and None in given:
            raise ValueError(
                "coordinator_address, num_processes and process_id go together: "
                f"got {given}. Pass all three, or none (then they come from "
                f"{KERAS_ADDRESSES}, {KERAS_NUM_PROCESSES}, {KERAS_PROCESS_ID})."
            )


@dataclasses.dataclass(frozen=True)
class Cluster:
    """What ``jax.distributed.initialize`` is called with (None: JAX detects it).

    Attributes:
        coordinator_address: process 0's ``host:port``.
        num_processes: processes in the job.
        process_id: this process's index.
        source: where the settings came from, for messages.
    """

    coordinator_address: str | None
    num_processes: int | None
    process_id: int | None
    source: str


def resolve(
    options: DistributedOptions, env: Mapping[str, str] | None = None
) -> Cluster | None:
    """The cluster this process belongs to, or None for a single process.

    Raises:
        ClusterError: a Keras variable is set but not the others, or bad.
    """
    environ = os.environ if env is None else env
    if options.distributed is False:
        return None
    if options.coordinator_address is not None:
        return Cluster(
            options.coordinator_address,
            options.num_processes,
            options.process_id,
            "the Agent's arguments",
        )
    keras_vars = (KERAS_ADDRESSES, KERAS_NUM_PROCESSES, KERAS_PROCESS_ID)
    present = [name for name in keras_vars if environ.get(name)]
    if present:
        if len(present) != len(keras_vars):
            missing = sorted(set(keras_vars) - set(present))
            raise ClusterError(
                f"{', '.join(present)} set but not {', '.join(missing)}: set all "
                f"three on every host (as keras.distribution.initialize reads them)."
            )
        try:
            count = int(environ[KERAS_NUM_PROCESSES])
            index = int(environ[KERAS_PROCESS_ID])
        except ValueError:
            raise ClusterError(
                f"{KERAS_NUM_PROCESSES} and {KERAS_PROCESS_ID} must be integers, "
                f"got {environ[KERAS_NUM_PROCESSES]!r} and "
                f"{environ[KERAS_PROCESS_ID]!r}."
            ) from None
        # Keras' convention: a comma-separated list, the first is process 0's.
        address = environ[KERAS_ADDRESSES].split(",")[0].strip()
        if count > 1 or options.distributed:
            return Cluster(address, count, index, "the KERAS_DISTRIBUTION_* variables")
        return None
    hosts = [h for h in environ.get(TPU_HOSTS, "").split(",") if h.strip()]
    if len(hosts) > 1 or (options.distributed and hosts):
        return Cluster(None, None, None, f"Cloud TPU ({len(hosts)} hosts)")
    if options.distributed:
        raise ClusterError(
            f"distributed=True but nothing says where the other processes are: "
            f"pass coordinator_address=, num_processes= and process_id=, or set "
            f"{KERAS_ADDRESSES}, {KERAS_NUM_PROCESSES} and {KERAS_PROCESS_ID}."
        )
    return None


@dataclasses.dataclass(frozen=True)
class Facts:
    """This process's place in the started job."""

    index: int
    count: int
    local_devices: int
    global_devices: int
    same_machine: bool


def start(
    cluster: Cluster,
    *,
    heartbeat_timeout_seconds: int,
    start_timeout_seconds: float = 300.0,
    say: Callable[[str], None] | None = None,
) -> Facts:
    """``jax.distributed.initialize`` once per process; what it joined.

    CPU collectives go through gloo (JAX's CPU client has no others across
    processes). ``heartbeat_timeout_seconds`` is JAX's own: the agent's peer
    watch must fire before it, because JAX ends a process whose peer it
    declared dead with an abort, not an exit status a launcher can read.
    While the others have not joined, ``say`` is told who is awaited, with
    the seconds left (:class:`JoinWait`); past ``start_timeout_seconds`` the
    process ends with a message instead of JAX's abort.
    """
    import jax

    if not is_started():
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        extra: dict[str, Any] = {}
        signature = inspect.signature(jax.distributed.initialize).parameters
        if "initialization_timeout" in signature:  # ours ends first
            extra["initialization_timeout"] = int(start_timeout_seconds) + 30
        with JoinWait(cluster, start_timeout_seconds, say or _to_stderr):
            jax.distributed.initialize(
                cluster.coordinator_address,
                cluster.num_processes,
                cluster.process_id,
                heartbeat_timeout_seconds=heartbeat_timeout_seconds,
                **extra,
            )
    host = zlib.crc32(socket.gethostname().encode())
    hosts = allgather_ints([host])
    return Facts(
        index=jax.process_index(),
        count=jax.process_count(),
        local_devices=jax.local_device_count(),
        global_devices=jax.device_count(),
        same_machine=len({int(row[0]) for row in hosts}) == 1,
    )


# How often the wait for the other processes says so.
JOIN_REPORT_SECONDS = 10.0


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class JoinWait:
    """While ``jax.distributed.initialize`` waits for the other processes:
    says who is awaited, with a countdown, and ends the process at the bound.

    JAX's own wait ends, after its timeout, in a C++ abort and a stack
    trace; this says what was awaited and how to fix it, and exits with
    :data:`~colab_resume.exit_status.FAILED` (a launcher restarting the
    same launch would wait the same way again).
    """

    def __init__(
        self, cluster: Cluster, bound: float, say: Callable[[str], None]
    ) -> None:
        self.cluster, self.bound, self.say = cluster, bound, say
        self._joined = threading.Event()
        self._thread = threading.Thread(
            target=self._count_down, name="jax-join-wait", daemon=True
        )

    def __enter__(self) -> JoinWait:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._joined.set()

    def awaited(self) -> str:
        """``process 0 of 2: waiting for process 1 at 10.0.0.2:1234``."""
        count, me = self.cluster.num_processes, self.cluster.process_id
        where = self.cluster.coordinator_address or "the coordinator JAX found"
        if count is None or me is None:  # JAX detects them (a TPU pod slice)
            return f"waiting for the other processes at {where}"
        others = [str(k) for k in range(count) if k != me]
        who = ("process " if len(others) == 1 else "processes ") + ", ".join(others)
        return f"process {me} of {count}: waiting for {who} at {where}"

    def _count_down(self) -> None:
        started = time.monotonic()
        # The first line once a join takes longer than a moment.
        if self._joined.wait(min(2.0, self.bound)):
            return
        while True:
            left = self.bound - (time.monotonic() - started)
            if left <= 0:
                break
            self.say(f"{self.awaited()}; giving up in {left:.0f}s")
            if self._joined.wait(min(JOIN_REPORT_SECONDS, left)):
                return
        self.say(
            f"{self.awaited()}: they did not join within {self.bound:.0f}s "
            f"(start_timeout_seconds). Check that every process was started, "
            f"each with the same coordinator address and process count and its "
            f"own process id, and that process 0's port is reachable from the "
            f"others; exiting with {exit_status.FAILED}."
        )
        logging.shutdown()
        os._exit(exit_status.FAILED)


def is_started() -> bool:
    """True once ``jax.distributed.initialize`` ran in this process."""
    import sys

    if "jax" not in sys.modules:
        return False
    from jax._src import distributed

    return distributed.global_state.client is not None


def process_count() -> int:
    """Processes in the job (1 unless the distributed runtime is started)."""
    if not is_started():
        return 1
    import jax

    return int(jax.process_count())


def process_index() -> int:
    """This process's index (0 unless the distributed runtime is started)."""
    if not is_started():
        return 0
    import jax

    return int(jax.process_index())


def allgather_ints(values: list[int]) -> Any:
    """Every process's ``values``: an int64 array of shape (processes, len)."""
    import numpy as np
    from jax.experimental import multihost_utils

    local = np.asarray(values, dtype=np.int64).reshape(1, -1)
    gathered = np.asarray(multihost_utils.process_allgather(local, tiled=True))
    return gathered.reshape(process_count(), -1)


def agree(what: str, value: int) -> int:
    """``value``, checked equal on every process.

    Raises:
        ClusterError: the processes disagree; the message lists each one's.
    """
    if process_count() == 1:
        return value
    seen = [int(row[0]) for row in allgather_ints([value])]
    if len(set(seen)) > 1:
        each = ", ".join(f"process {k}: {v}" for k, v in enumerate(seen))
        raise ClusterError(
            f"the processes disagree on {what} ({each}). Every process must "
            f"run the same code on its own shard of the same data, with the "
            f"same steps_per_epoch and batch size."
        )
    return value


class SettingsMismatch(ClusterError):
    """The processes were started with different values of one setting."""

    def __init__(self, setting: str, values: list[str]) -> None:
        each = "; ".join(f"process {k}: {v}" for k, v in enumerate(values))
        super().__init__(f"the processes disagree on {setting} ({each})")
        self.setting, self.values = setting, values


# A setting's value is shown to this length when the processes disagree.
_SHOWN_BYTES = 240


def agree_settings(settings: dict[str, str]) -> None:
    """Check that every process has the same ``settings`` (name -> value).

    One all-gather of a 63-bit digest per setting; where they differ, one
    more of that setting's text, so the error names each process's value.
    Every process calls this with the same names at the same point.

    Raises:
        SettingsMismatch: the first setting (by name) they disagree on.
    """
    if process_count() == 1 or not settings:
        return
    names = sorted(settings)
    rows = allgather_ints([_digest(settings[name]) for name in names])
    for column, name in enumerate(names):
        if len({int(row[column]) for row in rows}) > 1:
            raise SettingsMismatch(
                name, gather_texts(settings[name], limit=_SHOWN_BYTES)
            )


def _digest(text: str) -> int:
    raw = hashlib.sha256(text.encode("utf-8", "replace")).digest()[:8]
    return int.from_bytes(raw, "little") >> 1  # fits an int64


def gather_texts(text: str, *, limit: int | None = None) -> list[str]:
    """Every process's ``text`` (its first ``limit`` bytes), in process order.

    Two all-gathers: the lengths, then the bytes padded to the longest.
    Every process calls it at the same point; on one process, ``[text]``.
    """
    if process_count() == 1:
        return [text]
    data = text.encode("utf-8", "replace")[:limit]
    lengths = [int(row[0]) for row in allgather_ints([len(data)])]
    padded = list(data) + [0] * (max(lengths) - len(data))
    rows = allgather_ints(padded or [0])
    return [
        bytes(int(b) for b in row[:n]).decode("utf-8", "replace")
        for row, n in zip(rows, lengths, strict=True)
    ]


def from_leader(value: int) -> int:
    """Process 0's ``value`` on every process."""
    if process_count() == 1:
        return value
    return int(allgather_ints([value])[0][0])


def reached_sync_point(step: int) -> bool:
    """True on every process at the same step once any was told to stop.

    JAX's preemption sync service: a SIGTERM to any process (caught by
    JAX's own notifier, which a Python SIGTERM handler would replace) makes
    this true on all of them at one step.
    """
    if process_count() == 1:
        return False
    from jax.experimental import multihost_utils

    return bool(multihost_utils.reached_preemption_sync_point(step))


def process_rows(batch: Any) -> Any:
    """This process's rows of a global batch laid out over every process.

    What Keras' ``model.train_on_batch`` takes across processes (it
    assembles the global batch from every process's rows itself); a custom
    loop's ``train_step`` gets the assembled global ``jax.Array``. One
    process: ``batch`` as it is.
    """
    if process_count() == 1:
        return batch
    import keras
    import numpy as np

    def rows(array: Any) -> Any:
        shards = getattr(array, "addressable_shards", None)
        if shards is None:
            return array  # not laid out: already this process's
        by_start: dict[int, Any] = {}
        for shard in shards:  # replicas of a row block are listed once
            by_start.setdefault(shard.index[0].start or 0, shard.data)
        return np.concatenate([np.asarray(by_start[k]) for k in sorted(by_start)])

    return keras.tree.map_structure(rows, batch)


def local_rows(batch: Any, index: int, count: int) -> Any:
    """This process's contiguous share of a global batch's rows.

    Raises:
        ClusterError: the batch does not split evenly over the processes.
    """
    import keras

    def take(array: Any) -> Any:
        rows = int(array.shape[0])
        if rows % count:
            raise ClusterError(
                f"a global batch of {rows} rows cannot be split evenly over "
                f"{count} processes: batch by a multiple of {count}."
            )
        share = rows // count
        return array[index * share : (index + 1) * share]

    return keras.tree.map_structure(take, batch)


_data_sharding = "global"


def set_data_sharding(mode: str) -> None:
    """This process's :data:`DATA_SHARDINGS` mode (the run's option)."""
    global _data_sharding
    _data_sharding = mode


def shards_given() -> bool:
    """True when several processes each yield only their own rows."""
    return _data_sharding == "per_process" and process_count() > 1


def grain_shards() -> Shards | None:
    """This process's shard of a Grain pipeline, where each process reads
    its own (``data_sharding="per_process"``); None where batches are global."""
    if not shards_given():
        return None
    return Shards(process_index(), process_count(), gather_texts)


def agree_first_batch(batch: Any) -> Any:
    """Check every process's first batch has the same shapes; stands for all.

    With ``data_sharding="per_process"`` each process yields its own rows,
    so no process sees the global batch. One all-gather of each process's
    shapes, dtypes and a digest of its rows (an epoch's first batch only:
    cheap) checks they agree, and the result is what the data fingerprint
    hashes: the global row count and every process's digest, so a changed
    shard on any host changes it.

    Returns:
        ``(rows, digests)``: an empty array with the global batch's rows
        (its leading dimension is the batch size), and the digests.

    Raises:
        ClusterError: the processes' batches differ in shape or dtype; the
            message names each process's.
    """
    import hashlib

    import keras
    import numpy as np

    leaves = (
        [np.asarray(a) for a in keras.tree.flatten(batch)] if batch is not None else []
    )
    described = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in leaves) or "empty"
    digest = hashlib.sha256()
    for array in leaves:
        digest.update(np.ascontiguousarray(array).tobytes())
    head = digest.digest()
    rows = int(leaves[0].shape[0]) if leaves and leaves[0].ndim else 0
    facts = allgather_ints(
        [
            rows,
            len(described),
            int.from_bytes(head[:8], "big", signed=True),
            int.from_bytes(head[8:16], "big", signed=True),
        ]
    )
    width = int(facts[:, 1].max())
    text = list(described.encode()) + [0] * (width - len(described))
    each = [bytes(int(c) for c in row if c).decode() for row in allgather_ints(text)]
    if len(set(each)) > 1:
        said = "; ".join(f"process {k}: {d}" for k, d in enumerate(each))
        counts = [int(r) for r in facts[:, 0]]
        ours = process_index()
        odd = next(k for k, n in enumerate(counts) if each[k] != each[ours])
        raise ClusterError(
            f"with data_sharding='per_process' every process's make_dataset must "
            f"yield batches of the same shapes and dtypes (its rows of the "
            f"global batch), but they differ: process {odd}'s batch has "
            f"{counts[odd]} rows, process {ours}'s {counts[ours]} ({said})."
        )
    total = int(facts[:, 0].sum())
    return np.zeros((total, 0), np.uint8), np.asarray(facts[:, 2:], np.int64)

"""A checkpoint written by several processes: done markers, then one commit.

In a multi-process run every process writes the files it holds into the
checkpoint directory, then its done marker ``PROCESS-k.json`` listing them
with their sizes and CRC32Cs. Process 0 commits: it waits (bounded) for
every marker, checks every listed file against the storage listing, and
only then writes ``MANIFEST.json``, which lists the markers as it lists
files, and the other processes' files among its own (the rule is
:mod:`colab_resume.protocol.commit`). With ``DataParallel`` the whole state
is replicated: process 0 writes it once, the other markers list no files,
and still every process must have reached the step for the checkpoint to
count. A state sharded across processes (``ModelParallel``) has pieces
that only another process's devices hold: that process writes them.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from colab_resume.protocol.manifest import FileEntry, crc32c_bytes
from colab_resume.protocol.rundir import MANIFEST, CheckpointName, process_marker
from colab_resume.storage import Storage

MARKER_FORMAT = "colab_resume.process/1"


class IncompleteCheckpointError(RuntimeError):
    """A process's part of a checkpoint did not arrive or does not verify."""


@dataclasses.dataclass(frozen=True)
class ProcessRole:
    """This process's part in a multi-process checkpoint.

    Attributes:
        index: this process (0 commits).
        count: processes in the job.
        wait_seconds: how long process 0 waits for the others' markers.
    """

    index: int
    count: int
    wait_seconds: float = 60.0

    @property
    def commits(self) -> bool:
        return self.index == 0


def write_marker(
    storage: Storage,
    name: CheckpointName,
    role: ProcessRole,
    files: tuple[FileEntry, ...],
) -> None:
    """Say this process's part of ``name`` is complete (create-only)."""
    record = {
        "format": MARKER_FORMAT,
        "process": role.index,
        "processes": role.count,
        "step": name.step,
        "lease": name.lease,
        "files": [dataclasses.asdict(f) for f in files],
    }
    data = json.dumps(record, sort_keys=True).encode()
    storage.write_bytes(
        f"{name.path}/{process_marker(role.index)}", data, create_only=True
    )


def collect_markers(
    storage: Storage,
    name: CheckpointName,
    role: ProcessRole,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[tuple[FileEntry, ...], tuple[FileEntry, ...]]:
    """Wait for every process's marker of ``name`` and verify what they list.

    Returns:
        The markers as manifest entries (name, size, CRC32C of the bytes
        read), and the files the other processes' markers list (their
        parts of the state).

    Raises:
        IncompleteCheckpointError: a marker did not come within the wait, is
            not this checkpoint's, or lists a file that is missing or differs.
    """
    deadline = clock() + role.wait_seconds
    while True:
        listed = {
            info.path.rsplit("/", 1)[-1]: info for info in storage.list(name.path)
        }
        missing = [k for k in range(role.count) if process_marker(k) not in listed]
        if not missing:
            break
        if clock() > deadline:
            raise IncompleteCheckpointError(
                f"{name.dirname}: no done marker from process(es) {missing} within "
                f"{role.wait_seconds:.0f}s; not committed"
            )
        sleep(0.1)
    entries = []
    parts: list[FileEntry] = []
    for k in range(role.count):
        marker = process_marker(k)
        data = storage.read_bytes(f"{name.path}/{marker}", max_bytes=1 << 20)
        record = json.loads(data)
        _verify(name, k, record, listed)
        entries.append(
            FileEntry(name=marker, size=len(data), crc32c=crc32c_bytes(data))
        )
        if k != role.index:
            parts += [
                FileEntry(
                    name=item["name"], size=item["size"], crc32c=item.get("crc32c")
                )
                for item in record.get("files", [])
            ]
    names = [f.name for f in parts]
    if len(set(names)) != len(names) or any(
        n == MANIFEST or n.startswith("PROCESS-") for n in names
    ):
        raise IncompleteCheckpointError(
            f"{name.dirname}: the processes' markers list a file twice, or one "
            f"that is not a part of the state: {sorted(names)[:5]}"
        )
    return tuple(entries), tuple(parts)


def _verify(
    name: CheckpointName, process: int, record: Any, listed: dict[str, Any]
) -> None:
    where = f"{name.dirname}/{process_marker(process)}"
    if (
        not isinstance(record, dict)
        or record.get("format") != MARKER_FORMAT
        or record.get("process") != process
        or record.get("step") != name.step
        or record.get("lease") != name.lease
    ):
        raise IncompleteCheckpointError(f"{where} is not this checkpoint's marker")
    for item in record.get("files", []):
        info = listed.get(item.get("name"))
        if info is None or info.size != item.get("size"):
            raise IncompleteCheckpointError(
                f"{where} lists {item.get('name')!r}, which is missing or has "
                f"another size"
            )
        if info.crc32c is not None and info.crc32c != item.get("crc32c"):
            raise IncompleteCheckpointError(
                f"{where} lists {item.get('name')!r} with another CRC32C"
            )

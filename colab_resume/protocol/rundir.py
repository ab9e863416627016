"""Names inside a run directory (docs/DESIGN.md §4): the protocol's vocabulary.

```
run.json                                   create-only: run id, created, version
lease/00000001.json                        create-only, one per session
heartbeat/00000001.json                    overwritten by lease holder 1
heartbeat/00000001.p1.json                 process 1 of a multi-process lease 1
checkpoints/step-000001200.e00000001/...   checkpoint files of step 1200, lease 1
checkpoints/step-000001200.e00000001/PROCESS-1.json  process 1's files, done
checkpoints/step-000001200.e00000001/MANIFEST.json   written last, create-only
DONE.json                                  training finished
supervisor/00000001.json                   create-only, one per supervisor
supervisor/00000001.beat.json              overwritten by supervisor 1 every beat
supervisor/00000001.relaunches.json        overwritten by supervisor 1
history/00000001-000000.json               create-only chunks of lease 1's metrics
```

Pure functions only; the I/O lives in :mod:`colab_resume.storage`.
"""

from __future__ import annotations

import dataclasses
import re

RUN_RECORD = "run.json"
DONE_RECORD = "DONE.json"
LEASE_DIR = "lease"
HEARTBEAT_DIR = "heartbeat"
CHECKPOINT_DIR = "checkpoints"
SUPERVISOR_DIR = "supervisor"
HISTORY_DIR = "history"
TRACKERS_DIR = "trackers"
MANIFEST = "MANIFEST.json"

# A lease object is named with exactly 8 ASCII digits, from 00000001. Any
# other name under lease/ is not a lease, and every reader refuses the run
# by that name (colab_resume.protocol.listing.read_leases) rather than skip it: a
# second width would give one number two objects, and create-only would no
# longer decide who took it. ``[0-9]``, not ``\d``: ``\d`` matches every
# script's digits, and ``int("３")`` is 3.
MAX_LEASE = 99_999_999
_LEASE_RE = re.compile(r"([0-9]{8})\.json")  # fullmatch: no trailing newline
_CHECKPOINT_RE = re.compile(r"^step-(\d{9})\.e(\d{8})$")
_CHUNK_RE = re.compile(r"^(\d{8})-(\d{6})\.json$")


def process_heartbeat_path(lease: int, process: int) -> str:
    """Process ``process``'s own beat in a multi-process session ``lease``."""
    return f"{HEARTBEAT_DIR}/{lease:08d}.p{process}.json"


def process_marker(process: int) -> str:
    """The name of process ``process``'s done marker in a checkpoint directory."""
    return f"PROCESS-{process}.json"


def part_prefix(prefix: str, process: int) -> str:
    """The file prefix of process ``process``'s own part of a checkpoint
    (the pieces of a sharded state only its devices hold), beside the
    committing process's ``prefix`` files."""
    return f"{prefix}.p{process:05d}"


def lease_path(lease: int) -> str:
    return f"{LEASE_DIR}/{lease:08d}.json"


def heartbeat_path(lease: int) -> str:
    return f"{HEARTBEAT_DIR}/{lease:08d}.json"


def supervisor_path(number: int) -> str:
    """Supervisor ``number``'s record (create-only, like a lease)."""
    return f"{SUPERVISOR_DIR}/{number:08d}.json"


def relaunches_path(number: int) -> str:
    """What supervisor ``number`` relaunched (overwritten as it goes)."""
    return f"{SUPERVISOR_DIR}/{number:08d}.relaunches.json"


def supervisor_beat_path(number: int) -> str:
    """Supervisor ``number``'s heartbeat (overwritten every beat)."""
    return f"{SUPERVISOR_DIR}/{number:08d}.beat.json"


def tracker_path(name: str) -> str:
    """Where tracker ``name``'s identity lives (``trackers/mlflow.json``)."""
    return f"{TRACKERS_DIR}/{name}.json"


def chunk_path(lease: int, seq: int) -> str:
    """Chunk ``seq`` of lease ``lease``'s history (metrics and events)."""
    return f"{HISTORY_DIR}/{lease:08d}-{seq:06d}.json"


def parse_chunk_name(name: str) -> tuple[int, int] | None:
    """``(lease, seq)`` of ``00000003-000017.json`` (a bare name), else None."""
    match = _CHUNK_RE.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_lease_name(name: str) -> int | None:
    """Lease number of ``00000007.json`` (a bare file name), else None.

    None for every other name: another width (``7.json``), other digits
    (``７.json``), lease 0, a trailing newline.
    """
    match = _LEASE_RE.fullmatch(name)
    if not match:
        return None
    number = int(match.group(1))
    return number if number >= 1 else None


@dataclasses.dataclass(frozen=True, order=True)
class CheckpointName:
    """A checkpoint directory name; orders by (step, lease) as restore picks."""

    step: int
    lease: int

    @property
    def dirname(self) -> str:
        return f"step-{self.step:09d}.e{self.lease:08d}"

    @property
    def path(self) -> str:
        """Relative to the run directory."""
        return f"{CHECKPOINT_DIR}/{self.dirname}"

    @property
    def manifest_path(self) -> str:
        return f"{self.path}/{MANIFEST}"

    @classmethod
    def parse(cls, dirname: str) -> CheckpointName | None:
        match = _CHECKPOINT_RE.match(dirname)
        if not match:
            return None
        return cls(step=int(match.group(1)), lease=int(match.group(2)))

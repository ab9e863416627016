"""Names inside a run directory (docs/DESIGN.md §4): the protocol's vocabulary.

```
run.json                                   create-only: run id, created, version
lease/00000001.json                        create-only, one per session
heartbeat/00000001.json                    overwritten by lease holder 1
checkpoints/step-000001200.e00000001/...   checkpoint files of step 1200, lease 1
checkpoints/step-000001200.e00000001/MANIFEST.json   written last, create-only
DONE.json                                  training finished
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
MANIFEST = "MANIFEST.json"

# Lease numbers are written with 8 digits; any width is read, so a hostile
# or mistyped name is seen (and refused) rather than silently skipped.
MAX_LEASE = 99_999_999
_LEASE_RE = re.compile(r"^(\d+)\.json$")
_CHECKPOINT_RE = re.compile(r"^step-(\d{9})\.e(\d{8})$")


def lease_path(lease: int) -> str:
    return f"{LEASE_DIR}/{lease:08d}.json"


def heartbeat_path(lease: int) -> str:
    return f"{HEARTBEAT_DIR}/{lease:08d}.json"


def parse_lease_name(name: str) -> int | None:
    """Lease number of ``00000007.json`` (a bare file name, any width), else None."""
    match = _LEASE_RE.match(name)
    if not match:
        return None
    digits = match.group(1)
    # Past 18 digits the number only matters as "absurd"; int() of a long
    # enough string would itself fail.
    return int(digits) if len(digits) <= 18 else 10**18


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

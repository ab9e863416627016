"""Processes that start a race together: a start line, not a wall-clock time.

A time in the future ("start at now + 1.5 s") only lines racers up if
every one of them has imported by then; on a loaded machine one has not,
and the race is no race. Here each racer says it is ready and waits for a
go file, which the test creates once every racer has said so:

    racers = [worker("holder", ..., "--go", str(go)) for _ in range(5)]
    start_together(racers, go)           # test side

    wait_for_go(args.go)                 # worker side, imports done
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

# The line a racer prints when it is ready and waits for the go file.
SET = "SET"


class _Racer(Protocol):
    def expect(self, prefix: str, timeout: float = ...) -> str: ...


def start_together(racers: Iterable[_Racer], go: str | os.PathLike[str]) -> None:
    """Wait until every racer printed ``SET``, then let them all go.

    Args:
        racers: started workers (:class:`support.Process`) that call
            :func:`wait_for_go` with ``go``.
        go: the go file's path; it must not exist yet.

    Raises:
        AssertionError: a racer printed something else first, or nothing
            within two minutes (its stderr is in the message).
    """
    assert not os.path.exists(go), f"{go} exists: each start needs its own go file"
    for racer in racers:
        racer.expect(SET, timeout=120)
    Path(go).touch()


def wait_for_go(go: str) -> None:
    """Say ``SET`` and return once the go file exists (the worker side).

    Args:
        go: the go file's path, as the test passed it.
    """
    print(SET, flush=True)
    while not os.path.exists(go):
        # Short: the racers should leave the line within a few ms of each other.
        time.sleep(0.002)

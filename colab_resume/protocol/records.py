"""The JSON records of ownership: the run, its leases, their heartbeats.

Records read back from storage are untrusted input: another version of
this package, a person with an editor, or damage may have written them.
:func:`parse` checks every field's type, every number against
:data:`RANGES` and every fixed-form string against :data:`PATTERNS`, and
raises :class:`~colab_resume.errors.CorruptRecordError` naming the object
and the field, instead of letting a ``KeyError`` escape
from deep inside — or a lease that promises to beat once a century keep
its run ALIVE forever. String fields are cut to
:data:`~colab_resume.parsing.MAX_TEXT_CHARS` characters.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any, TypeVar

from colab_resume.errors import CorruptRecordError
from colab_resume.parsing import (
    DAY,
    MAX_INT,
    MAX_TIMESTAMP,
    YEAR,
    number,
    short,
    text,
)
from colab_resume.protocol import rundir

R = TypeVar("R")

# The range of every numeric field. Out of range is damage: a reader then
# judges the run with its default thresholds instead of, say, waiting
# forever on a lease whose dead_after_seconds is Infinity.
MAX_HEARTBEAT_SECONDS = DAY
MAX_DEAD_AFTER_SECONDS = DAY
MAX_STALL_AFTER_SECONDS = 7 * DAY
RANGES: dict[str, tuple[float, float]] = {
    "created_at": (0.0, MAX_TIMESTAMP),
    "written_at": (0.0, MAX_TIMESTAMP),
    "progress_at": (0.0, MAX_TIMESTAMP),
    "heartbeat_seconds": (1e-3, MAX_HEARTBEAT_SECONDS),
    "dead_after_seconds": (1e-3, MAX_DEAD_AFTER_SECONDS),
    "stall_after_seconds": (1e-3, MAX_STALL_AFTER_SECONDS),
    "since_progress_s": (0.0, 10 * YEAR),
    "lease": (0, rundir.MAX_LEASE),
    "took_over_from": (0, rundir.MAX_LEASE),
    "pid": (0, 2**31),
    "pid_namespace": (1, MAX_INT),
    "start_ticks": (0, MAX_INT),
    "beat": (0, MAX_INT),
    "step": (0, MAX_INT),
    "checkpoint_step": (0, MAX_INT),
}

# Text fields with a fixed form; anything else is damage. A boot id is the
# kernel's UUID (lower-case, as /proc/sys/kernel/random/boot_id prints it).
PATTERNS: dict[str, re.Pattern[str]] = {
    "boot_id": re.compile(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    ),
    # The verdicts of colab_resume.heartbeat.liveness.
    "previous_state": re.compile(r"NEW|ALIVE|STALLED|DEAD|STOPPED|COMPLETED|FAILED"),
}

# Holder states written into beats. Liveness (ALIVE, DEAD, ...) is judged
# by readers; these say what the holder itself believes it is doing.
HOLDER_STATES = (
    "starting",  # lease taken, building / restoring
    "training",
    "paused",
    "recovering",  # accelerator lost, reconnecting in the same process
    "stopped",  # left cleanly; the run can be taken at once
    "completed",
    "failed",  # unrecoverable error, recorded in `error`
    "fenced",  # a newer session took the run
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunRecord:
    """``run.json``: written once, create-only, by the first session."""

    run_id: str
    created_at: float
    package_version: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class LeaseRecord:
    """``lease/NNNNNNNN.json``: one per session that took the run.

    The timing settings are recorded so a reader anywhere judges liveness
    with the thresholds the holder promised to meet. ``boot_id``,
    ``pid_namespace`` and ``start_ticks`` (with ``host`` and ``pid``) name
    the holder's process exactly, so a reader on the same machine can prove
    it gone (:mod:`colab_resume.heartbeat.process`); they are None where the
    holder had no ``/proc``, and absent from leases of older versions.
    ``previous_state`` is the verdict on the session before when this one
    took the run: DEAD, STOPPED or FAILED (it was free), or ALIVE or
    STALLED (taken over with ``takeover=True``). Written with the lease, so
    a report can tell a death from a takeover even when neither session
    lived to write its history.
    """

    lease: int
    session_id: str
    host: str
    pid: int
    created_at: float
    package_version: str
    heartbeat_seconds: float
    dead_after_seconds: float
    stall_after_seconds: float
    took_over_from: int | None = None
    boot_id: str | None = None
    pid_namespace: int | None = None
    start_ticks: int | None = None
    previous_state: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BeatRecord:
    """``heartbeat/NNNNNNNN.json``: overwritten by the lease holder every beat.

    ``since_progress_s`` is measured on the holder's monotonic clock, so
    STALLED can be judged without comparing two machines' wall clocks.
    """

    session_id: str
    host: str
    lease: int
    beat: int
    state: str
    step: int | None
    progress_at: float | None  # holder's wall clock at the last step change
    since_progress_s: float
    written_at: float  # holder's wall clock; informative only
    accelerator: str | None = None
    checkpoint_step: int | None = None
    error: str | None = None


def to_json(record: Any) -> dict[str, Any]:
    return dataclasses.asdict(record)


def parse(cls: type[R], data: dict[str, Any], where: str) -> R:
    """Build record ``cls`` from untrusted JSON ``data`` read from ``where``.

    Unknown keys are ignored (newer writers may add fields). Strings longer
    than :data:`~colab_resume.parsing.MAX_TEXT_CHARS` are cut, with
    a marker saying how much.

    Raises:
        CorruptRecordError: a field is missing, has the wrong type, or a
            number outside its :data:`RANGES`.
    """
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name not in data:
            if field.default is not dataclasses.MISSING:
                continue
            raise CorruptRecordError(
                f"{where} lacks the field {field.name!r}; it was damaged or written "
                f"by an incompatible version. Delete it or upgrade colab_resume."
            )
        value = data[field.name]
        hint = hints[field.name]
        if not _matches(value, hint):
            raise CorruptRecordError(
                f"{where}: field {field.name!r} has {type(value).__name__} "
                f"{short(value)}, expected {hint}. The record is "
                f"damaged; delete it or upgrade colab_resume."
            )
        if value is not None and field.name in RANGES:
            low, high = RANGES[field.name]
            integer = float not in (typing.get_args(hint) or (hint,))
            value = number(
                value, where, field.name, low=low, high=high, integer=integer
            )
            value = value if integer else float(value)
        if isinstance(value, str) and field.name in PATTERNS:
            if not PATTERNS[field.name].fullmatch(value):
                raise CorruptRecordError(
                    f"{where}: field {field.name!r} is {short(value)}, not of the "
                    f"form colab_resume writes. The record is damaged or hostile; "
                    f"delete it."
                )
        if isinstance(value, str):
            value = text(value)
        values[field.name] = value
    record = cls(**values)
    state = getattr(record, "state", None)
    if state is not None and state not in HOLDER_STATES:
        raise CorruptRecordError(
            f"{where}: unknown holder state {short(state)}; expected one of "
            f"{', '.join(HOLDER_STATES)}."
        )
    return record


def _matches(value: Any, hint: Any) -> bool:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_matches(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)

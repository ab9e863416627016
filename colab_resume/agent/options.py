"""The Agent's settings, checked up front (docs/DESIGN.md §5)."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from colab_resume import defaults
from colab_resume.checkpoint.triggers import DEFAULT_LIFETIME_SECONDS
from colab_resume.heartbeat.session import (
    BEATS_BEFORE_DEAD,
    DEFAULT_HEARTBEAT_SECONDS,
    RUN_ID_PATTERN,
)
from colab_resume.validate import check_bool, check_int, check_seconds


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentOptions:
    """Everything :class:`~colab_resume.Agent` is configured with.

    Attributes:
        save_every_steps: checkpoint every N steps (None: no step trigger).
        save_every_seconds: checkpoint every T seconds (None: no time trigger).
        keep: newest committed checkpoints to keep.
        keep_every_steps: also keep every checkpoint at a multiple of this.
        heartbeat_seconds: interval between heartbeats (10: a rerun on a
            new VM waits at most 40 s after a silent death).
        dead_after_seconds: silence after which a holder is dead
            (None: 4 heartbeats). A rerun on the holder's own host does not
            wait when the holder's process is gone.
        stall_after_seconds: time without step progress reported as STALLED.
        takeover: take the run even from a live session (it gets fenced).
        storage_options: passed to fsspec (``token=``, ``endpoint_url=``...).
        prefer: ``"auto"``, ``"tpu"``, ``"gpu"`` or ``"cpu"``.
        cpu_replicas: logical CPU devices for a MirroredStrategy rehearsal.
        precision: ``"auto"``, ``"float32"``, ``"mixed_bfloat16"``,
            ``"mixed_float16"``. ``"auto"`` keeps a policy set with
            ``keras.mixed_precision.set_global_policy`` before connecting.
        max_recoveries: accelerator losses recovered in one session before
            giving up.
        recovery_backoff_seconds: first wait before reconnecting; doubles.
        lifetime_seconds: save once when the VM is this old (Colab ends
            runtimes at ~12 h); None disables.
        storage_retry_seconds: how long one storage call (a checkpoint
            upload's file, a commit, a read) retries transient faults before
            the run fails with ``StorageUnavailableError``. An outage shorter
            than this costs retries, not the run.
        run_id: names this run. A new run directory records it; an existing
            one whose ``run.json`` names another run is refused
            (``RunMismatchError``) before anything is written. None (the
            default) continues whatever run the directory holds.
        reset_data_fingerprints: on resume, discard the data fingerprints
            stored with the checkpoint and record new ones, instead of
            raising ``NonDeterministicDatasetError``: for the one run after
            fixing a non-deterministic ``make_dataset``. An event says what
            was discarded.
    """

    save_every_steps: int | None = None
    save_every_seconds: float | None = defaults.SAVE_EVERY_SECONDS
    keep: int = defaults.KEEP
    keep_every_steps: int | None = None
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    dead_after_seconds: float | None = None
    stall_after_seconds: float = defaults.STALL_AFTER_SECONDS
    takeover: bool = False
    storage_options: dict[str, Any] | None = None
    prefer: str = "auto"
    cpu_replicas: int = 1
    precision: str = "auto"
    max_recoveries: int = 3
    recovery_backoff_seconds: float = 2.0
    lifetime_seconds: float | None = DEFAULT_LIFETIME_SECONDS
    storage_retry_seconds: float = defaults.STORAGE_RETRY_SECONDS
    run_id: str | None = None
    reset_data_fingerprints: bool = False

    def __post_init__(self) -> None:
        if self.save_every_steps is None and self.save_every_seconds is None:
            raise ValueError(
                "save_every_steps and save_every_seconds are both None, so no "
                "checkpoint would ever be written. Set at least one, e.g. "
                "save_every_seconds=600."
            )
        for name in ("save_every_steps", "keep_every_steps"):
            check_int(name, getattr(self, name), optional=True)
        check_int("keep", self.keep)
        check_int("max_recoveries", self.max_recoveries, minimum=0)
        for name in ("save_every_seconds", "dead_after_seconds", "lifetime_seconds"):
            check_seconds(name, getattr(self, name), optional=True)
        for name in (
            "heartbeat_seconds",
            "stall_after_seconds",
            "recovery_backoff_seconds",
            "storage_retry_seconds",
        ):
            check_seconds(name, getattr(self, name))
        check_bool("takeover", self.takeover)
        check_bool(
            "reset_data_fingerprints",
            self.reset_data_fingerprints,
            hint="Set it True for one run after fixing a non-deterministic "
            "make_dataset.",
        )
        if self.run_id is not None and not (
            isinstance(self.run_id, str) and RUN_ID_PATTERN.fullmatch(self.run_id)
        ):
            raise ValueError(
                f"run_id must be 1-128 letters, digits, '.', '_' or '-' (or None), "
                f"got {self.run_id!r}; e.g. run_id='mnist-resnet-v3'."
            )
        if (
            self.dead_after_seconds is not None
            and self.dead_after_seconds <= self.heartbeat_seconds
        ):
            raise ValueError(
                f"dead_after_seconds ({self.dead_after_seconds:g}) must be longer "
                f"than heartbeat_seconds ({self.heartbeat_seconds:g}), or a live "
                f"session would look dead between two beats; e.g. "
                f"dead_after_seconds={BEATS_BEFORE_DEAD * self.heartbeat_seconds:g} "
                f"({BEATS_BEFORE_DEAD} beats), or "
                f"None for that default."
            )
        if self.storage_options is not None and not isinstance(
            self.storage_options, dict
        ):
            raise ValueError(
                f"storage_options must be a dict of fsspec options (e.g. "
                f"{{'token': 'anon'}}) or None, got {self.storage_options!r}."
            )


def agent_options(**options: Any) -> AgentOptions:
    """``AgentOptions(**options)``, answering a misspelt name with "did you mean".

    Raises:
        TypeError: an option that does not exist (the message suggests the
            closest one and lists them all).
        ValueError: a bad value (the message names the field and the fix).
    """
    known = [f.name for f in dataclasses.fields(AgentOptions)]
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"Agent got an unknown option {name!r}.{hint} The options are: "
                f"{', '.join(known)}."
            )
    return AgentOptions(**options)

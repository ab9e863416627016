"""The Agent's settings, checked up front (docs/DESIGN.md §5).

Users pass flat keyword arguments (``save_every_steps=``, ``keep=``,
``prefer=``...); each one belongs to the option class of the part that uses
it, and :class:`AgentOptions` is composed of those objects. A field's
default and its check live once, in the class that owns it; this module
only says which flat name goes where (``_FLAT``) and checks the few options
no part owns.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from colab_resume.backend.jax_distributed import DistributedOptions
from colab_resume.checkpoint.manager import CheckpointConfig
from colab_resume.checkpoint.triggers import TriggerOptions
from colab_resume.heartbeat.session import SessionOptions
from colab_resume.launch.teardown import Teardown, teardown_of
from colab_resume.retry import RetryPolicy
from colab_resume.runtime.options import ConnectOptions
from colab_resume.validate import build, check_bool, check_int

# The part each flat option configures: flat name -> (part, that part's
# field). The order is the order the options are listed in messages.
_FLAT: dict[str, tuple[str, str]] = {
    "save_every_steps": ("triggers", "every_steps"),
    "save_every_seconds": ("triggers", "every_seconds"),
    "save_every": ("triggers", "every"),
    "save_every_floor_seconds": ("triggers", "auto_floor_seconds"),
    "save_every_ceiling_seconds": ("triggers", "auto_ceiling_seconds"),
    "save_every_prior_seconds": ("triggers", "auto_prior_seconds"),
    "keep": ("checkpoints", "keep"),
    "keep_every_steps": ("checkpoints", "keep_every_steps"),
    "frozen": ("checkpoints", "frozen"),
    "heartbeat_seconds": ("session", "heartbeat_seconds"),
    "dead_after_seconds": ("session", "dead_after_seconds"),
    "stall_after_seconds": ("session", "stall_after_seconds"),
    "takeover": ("session", "takeover"),
    "storage_options": ("", "storage_options"),
    "prefer": ("connect", "prefer"),
    "cpu_replicas": ("connect", "cpu_replicas"),
    "precision": ("connect", "precision"),
    "strategy": ("connect", "strategy"),
    "max_recoveries": ("", "max_recoveries"),
    "recovery_backoff_seconds": ("recovery", "initial_seconds"),
    "lifetime_seconds": ("triggers", "lifetime_seconds"),
    "storage_retry_seconds": ("storage_retry", "total_seconds"),
    "run_id": ("session", "expected_run_id"),
    "reset_data_fingerprints": ("", "reset_data_fingerprints"),
    "on_runtime_change": ("", "on_runtime_change"),
    "exit_on_preemption": ("", "exit_on_preemption"),
    "preemption_notices": ("", "preemption_notices"),
    "on_done": ("", "on_done"),
    "distributed": ("cluster", "distributed"),
    "coordinator_address": ("cluster", "coordinator_address"),
    "num_processes": ("cluster", "num_processes"),
    "process_id": ("cluster", "process_id"),
    "peer_dead_after_seconds": ("cluster", "peer_dead_after_seconds"),
    "data_sharding": ("cluster", "data_sharding"),
    "start_timeout_seconds": ("cluster", "start_timeout_seconds"),
}
OPTIONS = tuple(_FLAT)
RUNTIME_CHANGE_CHOICES = ("continue", "refuse")

# The options no part owns, with their defaults ("" in _FLAT: the Agent's).
RECOVERY_BACKOFF_SECONDS = 2.0
_OWN_DEFAULTS: dict[str, Any] = {
    "storage_options": None,
    "max_recoveries": 3,
    "reset_data_fingerprints": False,
    "on_runtime_change": "continue",
    "exit_on_preemption": None,
    "preemption_notices": None,
    "on_done": None,
}


@dataclasses.dataclass(frozen=True, init=False)
class AgentOptions:
    """Everything :class:`~colab_resume.Agent` is configured with.

    Built from flat keyword arguments, ``AgentOptions(keep=5, prefer="cpu")``;
    each is readable back flat (``options.keep``) and lives in the part that
    uses it (``options.checkpoints.keep``).

    Keyword Args:
        save_every_steps (int | None): checkpoint every N steps (None: no step trigger).
        save_every_seconds (float | None): checkpoint every T seconds (None: no
            time trigger).
        save_every (str | None): ``"auto"``: instead of ``save_every_seconds``,
            the interval that loses the least time to saves and to steps
            redone after failures, from this run's measured save cost and
            failures (``√(2·C·M)``; :mod:`colab_resume.checkpoint.cadence`),
            re-chosen after every save (giving ``save_every_seconds`` too is
            refused). ``save_every_steps``, if given, still applies.
        save_every_floor_seconds (float): the shortest interval ``"auto"``
            chooses (30).
        save_every_ceiling_seconds (float): the longest (3600); a store's
            daily upload cap (Drive) may lengthen it beyond.
        save_every_prior_seconds (float): what ``"auto"`` assumes of the
            training time between failures before it has seen enough of
            them (3600, weighed as a tenth of a failure); set it to what
            your platform is known to do (a spot VM's typical lifetime).
        keep (int): newest committed checkpoints to keep.
        keep_every_steps (int | None): also keep every checkpoint at a multiple of this.
        frozen (str): ``"once"`` (default): arrays no training step changes
            (a LoRA's frozen base, layers with ``trainable = False``) are
            written by the first save as shared objects of the run
            directory and referenced by later checkpoints, so a later save
            copies and uploads only what trains; ``"rebuild"``: not written
            at all, their SHA-256 recorded, and a resume refuses
            (``FrozenArraysChangedError``) unless ``build_model()`` makes
            the same ones; ``"every"``: every array in every checkpoint
            (docs/guide/training.md).
        heartbeat_seconds (float): interval between heartbeats (10: a rerun on a
            new VM waits at most 40 s after a silent death).
        dead_after_seconds (float | None): silence after which a holder is dead
            (None: 4 heartbeats). A rerun on the holder's own host does not
            wait when the holder's process is gone.
        stall_after_seconds (float): time without step progress reported as STALLED.
        takeover (bool): take the run even from a live session (it gets fenced).
        storage_options (dict | None): passed to fsspec (``token=``,
            ``endpoint_url=``...).
        prefer (str): ``"auto"``, ``"tpu"``, ``"gpu"`` or ``"cpu"``.
        cpu_replicas (int): logical CPU devices for a MirroredStrategy rehearsal.
        precision (str): ``"auto"``, ``"float32"``, ``"mixed_bfloat16"``,
            ``"mixed_float16"``. ``"auto"`` keeps a policy set with
            ``keras.mixed_precision.set_global_policy`` before connecting.
        strategy (tf.distribute.Strategy | None): TensorFlow: train under this
            strategy of yours, kept as it is (``prefer`` and ``cpu_replicas``
            do not apply); one whose ``scope()`` you entered around the
            call is kept too. On JAX set a ``keras.distribution`` instead.
        max_recoveries (int): accelerator losses recovered in one session before
            giving up.
        recovery_backoff_seconds (float): first wait before reconnecting; doubles.
        lifetime_seconds (float | None): save once when the VM is this old (Colab ends
            runtimes at ~12 h); the default (11.5 h) counts in Colab
            only, any other value anywhere; None disables.
        storage_retry_seconds (float): how long one storage call (a checkpoint
            upload's file, a commit, a read) retries transient faults before
            the run fails with ``StorageUnavailableError``. An outage shorter
            than this costs retries, not the run.
        run_id (str | None): names this run. A new run directory records it; an existing
            one whose ``run.json`` names another run is refused
            (``RunMismatchError``) before anything is written. None (the
            default) continues whatever run the directory holds.
        on_runtime_change (str): what a resume does when the checkpoint was
            written under another runtime (backend, device kind or count,
            distribution or layout, precision, library versions):
            ``"continue"`` (default) says what changed and whether the end
            can still be bitwise equal, then trains; ``"refuse"`` raises
            ``RuntimeChangedError`` naming the changes, before training.
        reset_data_fingerprints (bool): on resume, discard the data fingerprints
            (and the position proof) stored with the checkpoint and record
            new ones, instead of raising ``NonDeterministicDatasetError``
            or ``PositionError``: for the one run after fixing a
            non-deterministic ``make_dataset``. An event says what was
            discarded.
        exit_on_preemption (bool | None): after the final checkpoint of a run
            that SIGTERM or a preemption notice ended before its end, raise
            :class:`~colab_resume.Preempted` (exit status 143) out of
            ``fit``/``run``, so a script exits with a status its launcher
            acts on. None (the default): only outside an IPython kernel; a
            notebook's ``fit`` returns (``agent.stopped`` is True). A run
            ``stop()`` ended always returns.
        preemption_notices (bool | None): watch the Compute Engine metadata
            server for preemption and maintenance notices while training
            (:mod:`colab_resume.launch.notices`). None: on Compute Engine and
            Cloud TPU VMs (not Colab or Kaggle).
        on_done (str | callable | Teardown | None): the teardown run after a
            COMPLETED run (a command line, run without a shell, or a
            callable); see :mod:`colab_resume.launch.teardown`.
        distributed (bool | None): JAX multi-process (docs/guide/multi-host.md):
            None starts it when ``KERAS_DISTRIBUTION_*`` or a Cloud TPU pod
            slice says there are several processes; True always; False never.
        coordinator_address (str | None): process 0's ``host:port``, with
            ``num_processes`` and ``process_id`` (instead of the environment).
        num_processes (int | None): processes in the job.
        process_id (int | None): this process's index.
        peer_dead_after_seconds (float): a peer process silent this long is
            dead; the survivors exit with ``exit_status.RESTART`` (75).
        start_timeout_seconds (float): how long a process waits at start for
            the others to join (saying whom it awaits, with a countdown)
            before it exits with ``exit_status.FAILED`` (1), naming what to
            check (default 300).
        data_sharding (str): what each process's ``make_dataset`` yields in
            a multi-process run. ``"global"`` (default): the global batches,
            the same on every process; the agent feeds each process its
            contiguous share of the rows. ``"per_process"``: only this
            process's rows (per-host files, ``jax.process_index()``), fed as
            they are; every process's first batch of an epoch must have the
            same shapes and dtypes, else every process fails naming them.

    Attributes:
        session: how the session beats and judges the one before it.
        triggers: when to save (``boot_time`` is filled in per session).
        checkpoints: how checkpoints are kept (``io_device`` is filled in
            once connected).
        connect: how to pick and set up the accelerator.
        storage_retry: how long one storage call retries.
        cluster: whether and how to start JAX's multi-process runtime.
        recovery: the wait between recoveries, doubling from
            ``recovery_backoff_seconds`` up to the last of
            ``max_recoveries``.
        storage_options: as given.
        max_recoveries: as given.
        reset_data_fingerprints: as given.
        on_runtime_change: as given.
        exit_on_preemption: as given.
        preemption_notices: as given.
        on_done: as a :class:`~colab_resume.launch.teardown.Teardown`, or None.

    Raises:
        TypeError: an option that does not exist (the message suggests the
            closest one and lists them all).
        ValueError: a bad value (the message names the option and the fix).
    """

    session: SessionOptions
    triggers: TriggerOptions
    checkpoints: CheckpointConfig
    connect: ConnectOptions
    storage_retry: RetryPolicy
    recovery: RetryPolicy
    cluster: DistributedOptions
    storage_options: dict[str, Any] | None
    max_recoveries: int
    reset_data_fingerprints: bool
    on_runtime_change: str
    exit_on_preemption: bool | None
    preemption_notices: bool | None
    on_done: Teardown | None

    def __init__(self, **options: Any) -> None:
        for name in options:
            if name not in _FLAT:
                close = difflib.get_close_matches(name, OPTIONS, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise TypeError(
                    f"Agent got an unknown option {name!r}.{hint} The options "
                    f"are: {', '.join(OPTIONS)}."
                )
        values: dict[str, dict[str, Any]] = {}
        names: dict[str, dict[str, str]] = {}
        for flat, (owner, field) in _FLAT.items():
            names.setdefault(owner, {})[field] = flat
            if flat in options:
                values.setdefault(owner, {})[field] = options[flat]
        own = {**_OWN_DEFAULTS, **values.get("", {})}

        def part(name: str, make: Any) -> None:
            made = build(make, names[name], **values.get(name, {}))
            object.__setattr__(self, name, made)

        part("triggers", TriggerOptions)
        if self.triggers.auto and options.get("save_every_seconds") is not None:
            raise ValueError(
                f"save_every='auto' chooses the interval in place of "
                f"save_every_seconds, which is {options['save_every_seconds']!r} "
                f"here: drop one of the two (save_every_steps may stay)."
            )
        if (
            self.triggers.every_steps is None
            and self.triggers.every_seconds is None
            and not self.triggers.auto
        ):
            raise ValueError(
                "save_every_steps and save_every_seconds are both None, so no "
                "checkpoint would ever be written. Set at least one, e.g. "
                "save_every_seconds=600."
            )
        part("checkpoints", CheckpointConfig)
        part("session", SessionOptions)
        check_bool(
            "reset_data_fingerprints",
            own["reset_data_fingerprints"],
            hint="Set it True for one run after fixing a non-deterministic "
            "make_dataset.",
        )
        if own["storage_options"] is not None and not isinstance(
            own["storage_options"], dict
        ):
            raise ValueError(
                f"storage_options must be a dict of fsspec options (e.g. "
                f"{{'token': 'anon'}}) or None, got {own['storage_options']!r}."
            )
        check_int("max_recoveries", own["max_recoveries"], minimum=0)
        if own["on_runtime_change"] not in RUNTIME_CHANGE_CHOICES:
            raise ValueError(
                f"on_runtime_change must be one of "
                f"{', '.join(map(repr, RUNTIME_CHANGE_CHOICES))}, got "
                f"{own['on_runtime_change']!r}: 'refuse' stops a resume on "
                f"another runtime before training, 'continue' says what changed."
            )
        for name in ("exit_on_preemption", "preemption_notices"):
            if own[name] is not None:
                check_bool(name, own[name], hint="Or None: decided for this runtime.")
        own["on_done"] = teardown_of(own["on_done"])
        for name, value in own.items():
            object.__setattr__(self, name, value)
        part("connect", ConnectOptions)
        part("cluster", DistributedOptions)
        part("storage_retry", RetryPolicy)
        # The Agent's own default first wait (RetryPolicy's is a storage
        # call's); the cap is the wait before the last recovery.
        values.setdefault("recovery", {}).setdefault(
            "initial_seconds", RECOVERY_BACKOFF_SECONDS
        )
        part("recovery", RetryPolicy)
        first = self.recovery.initial_seconds
        object.__setattr__(
            self,
            "recovery",
            dataclasses.replace(
                self.recovery, max_seconds=first * 2 ** max(0, self.max_recoveries - 1)
            ),
        )

    def __getattr__(self, name: str) -> Any:
        # The flat names read back from the part that owns them. Only called
        # for a name that is not a real attribute.
        where = _FLAT.get(name)
        if where is None or not where[0]:
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}"
            )
        return getattr(object.__getattribute__(self, where[0]), where[1])


def agent_options(**options: Any) -> AgentOptions:
    """``AgentOptions(**options)`` (kept for its callers).

    Raises:
        TypeError: an option that does not exist (the message suggests the
            closest one and lists them all).
        ValueError: a bad value (the message names the field and the fix).
    """
    return AgentOptions(**options)

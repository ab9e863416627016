"""One run on several processes (JAX multi-process): roles, beats, the watch.

The same script runs on every host. Process 0 is the run's one owner: it
takes the lease, beats the run's heartbeat, writes the state and commits.
Every process (0 included) also beats its own file,
``heartbeat/<lease>.p<k>.json``, and watches the others' beats: a peer
whose beat has not moved for ``peer_dead_after_seconds`` (by this
process's own clock, so clock skew between hosts does not matter) is dead,
and so is one whose beat says it failed. Multi-controller JAX is not fault
tolerant — a survivor would crash or hang in its next collective — so the
survivors end at once with :data:`~colab_resume.exit_status.RESTART`: the
launcher restarts every process, and they resume from the last committed
step. A collective that fails in training means the same.

Preemption: a Python SIGTERM handler installed after
``jax.distributed.initialize`` would replace JAX's own notifier, so none is
installed; :meth:`MultiHost.at_step` asks JAX's preemption sync point at
every step instead, which becomes true on every process at the same step,
and they all checkpoint there and end with
:data:`~colab_resume.exit_status.PREEMPTED`.

Saves and stops that one process alone would decide (a save-now, stop(),
a save every T seconds) are agreed (:meth:`MultiHost.agree`): one small
all-gather of every process's wishes at agreement steps about
:data:`AGREE_EVERY_SECONDS` apart, the spacing in steps chosen by process
0 from its step time (an all-gather costs milliseconds; one per step would
slow a fast model).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from colab_resume import exit_status
from colab_resume.agent.controls import Controls
from colab_resume.agent.driver import Driver
from colab_resume.agent.options import AgentOptions
from colab_resume.agent.processes import Agree, StopAt, first_batch_of, plan_of
from colab_resume.backend import jax_distributed
from colab_resume.backend.jax_distributed import DistributedOptions, Facts
from colab_resume.checkpoint import CheckpointManager
from colab_resume.checkpoint.processes import ProcessRole
from colab_resume.errors import CorruptRecordError
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession
from colab_resume.protocol import rundir
from colab_resume.runtime import Connection
from colab_resume.storage import Storage

log = logging.getLogger(__name__)

LOCAL_SCHEMES = ("", "file", "local")
# Agreement steps this far apart in training time (a save-now or stop waits
# up to this long); never more than MAX_AGREE_STEPS steps apart.
AGREE_EVERY_SECONDS = 1.0
MAX_AGREE_STEPS = 1000
# Beat states of a process that is ending on its own; process 0 waits for
# them before it ends its coordination service (MultiHost._restart), and
# then this long for the exit that follows such a beat.
ENDING = frozenset({"restart", "failed", "preempted", "completed", "stopped"})
ENDING_GRACE_SECONDS = 0.3


class MultiHost:
    """This process's part in a multi-process run; see the module docstring."""

    def __init__(
        self,
        storage: Storage,
        facts: Facts,
        options: DistributedOptions,
        events: EventLog,
    ) -> None:
        self.storage = storage
        self.facts = facts
        self.options = options
        self.events = events
        self.preempted_at: int | None = None
        self.lease = 0
        self._step = 0
        self._state = "starting"
        self._seq = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ending = threading.Lock()  # held by the thread ending the process
        self._next_agree = 1
        self._agreed_at = (0, time.monotonic())
        self._states: dict[int, Any] = {}  # each peer's last beat's state
        self._hosts: dict[int, str] = {}  # each peer's host, as its beat says
        # Each peer's last beat mark and when this process saw it change.
        self._seen: dict[int, tuple[Any, float]] = {}
        self._failed_since: dict[int, float] = {}

    @property
    def index(self) -> int:
        return self.facts.index

    @property
    def count(self) -> int:
        return self.facts.count

    @property
    def leads(self) -> bool:
        return self.facts.index == 0

    @property
    def role(self) -> ProcessRole:
        return ProcessRole(self.index, self.count, self.options.peer_dead_after_seconds)

    # --- the lease and the start point, agreed --------------------------------

    def take_run(
        self,
        storage: Storage,
        options: AgentOptions,
        events: EventLog,
        countdown: Callable[..., Any],
        connection: Connection | None,
    ) -> tuple[Any, CheckpointManager]:
        """Process 0 takes the lease; every process gets its number and beats."""
        session: Any
        if self.leads:
            session = RunSession.open(
                storage, options.session, events=events, on_countdown=countdown
            )
            self.share_lease(session.lease)
        else:
            self.share_lease(0)
            session = FollowerSession(self)
        manager = CheckpointManager(
            storage,
            lease=self.lease,
            fence=session.fence,
            events=events,
            config=options.checkpoints,
            process=self.role,
        )
        return session, manager

    def share_lease(self, lease: int) -> int:
        """Process 0's lease on every process; starts this process's beats."""
        self.lease = jax_distributed.from_leader(lease)
        self._start_watch()
        return self.lease

    def agree_settings(self, settings: dict[str, str]) -> None:
        """Every process was started with the same ``settings``, or none trains.

        A launcher restarts a job on RESTART, and processes that disagree
        (another run directory, save cadence, epochs, model) would only
        meet again in a collective that never completes: so they all end
        here, at once, with :data:`~colab_resume.exit_status.MISMATCH`,
        naming the setting and each process's value.

        Raises:
            ProcessesDisagree: they differ (a SystemExit of MISMATCH).
        """
        try:
            jax_distributed.agree_settings(settings)
        except jax_distributed.SettingsMismatch as exc:
            message = (
                f"process {self.index} of {self.count}: {exc}. Every process of "
                f"one run must be started with the same script and settings; fix "
                f"the launch (exit {exit_status.MISMATCH}: a restart would start "
                f"them the same way again)"
            )
            self.events.emit("run.settings_differ", message, level="error")
            print(message, file=sys.stderr, flush=True)
            raise exit_status.ProcessesDisagree(message) from None

    def agree_start(self, step: int, driver: Driver) -> None:
        """Every process has the same plan, and restored the same step.

        The plan: :func:`~colab_resume.agent.processes.plan_of`, and where
        every process yields the global batches, the first batch's shapes.

        Raises:
            ProcessesDisagree: their plans differ (see :meth:`agree_settings`).
            ClusterError: they restored different steps.
        """
        plan = plan_of(driver)
        if not jax_distributed.shards_given():  # per-process rows: checked as fed
            plan.update(first_batch_of(driver))
        self.agree_settings(plan)
        jax_distributed.agree("the step restored from the run directory", step)
        self._next_agree = step + 1
        self._agreed_at = (step, time.monotonic())

    def agree(self, step: int, wishes: int) -> int | None:
        """Every process's ``wishes`` OR-ed, at an agreement step; else None.

        Every process calls this at every step with the same steps, so they
        meet in the all-gather at the same ones: the next one is process
        0's choice, gathered with the wishes.
        """
        if step < self._next_agree:
            return None
        last_step, last_time = self._agreed_at
        now = time.monotonic()
        per_step = (now - last_time) / max(1, step - last_step)
        spacing = (
            MAX_AGREE_STEPS
            if per_step <= 0
            else max(1, min(MAX_AGREE_STEPS, int(AGREE_EVERY_SECONDS / per_step)))
        )
        rows = jax_distributed.allgather_ints([wishes, spacing])
        agreed = 0
        for row in rows:
            agreed |= int(row[0])
        self._next_agree = step + int(rows[0][1])
        self._agreed_at = (step, now)
        return agreed

    # --- per step ---------------------------------------------------------------

    def at_step(self, step: int) -> bool:
        """True at the step where every process must checkpoint and stop."""
        self._step = step
        self._state = "training"
        if self.preempted_at is None and jax_distributed.reached_sync_point(step):
            self.preempted_at = step
            self.events.emit(
                "run.preempted",
                f"preemption notice: every process checkpoints at step {step} "
                f"and exits with {exit_status.PREEMPTED}",
                level="warning",
                step=step,
            )
        return self.preempted_at is not None

    def step_agreement(self) -> tuple[StopAt | None, Agree | None]:
        """The step duties' preemption sync point and agreement."""
        return self.at_step, self.agree

    def guarding(
        self, options: AgentOptions, controls: Controls, events: EventLog
    ) -> contextlib.AbstractContextManager[None]:
        """Nothing: JAX's notifier must keep SIGTERM, and a cloud notice
        stopping one process alone would hang the others in their next
        collective; only the preemption sync point stops every process."""
        return contextlib.nullcontext()

    # --- the end ------------------------------------------------------------------

    def ended(self, stopped: bool) -> None:
        """After the final commit: this process's last beat says how it ended.

        A preempted run then leaves ``fit``/``run`` as any preempted run does
        (``Agent`` raises :class:`~colab_resume.Preempted`: exit 143).
        """
        if self.preempted_at is not None:
            self.beat_end("preempted")
        else:
            self.beat_end("stopped" if stopped else "completed")

    def beat_end(self, state: str) -> None:
        """This process's last beat says how it ended."""
        self._state = state
        self._beat()
        self._stop.set()

    def after_error(self, exc: BaseException) -> None:
        """After a training error: a lost peer ends this process with RESTART.

        A collective fails (or would hang) once a peer is gone; wait up to
        the bound for the watch to confirm it, then end with RESTART. An
        error with every peer alive is the caller's to raise.
        """
        if isinstance(
            exc,
            (
                KeyboardInterrupt,
                jax_distributed.ClusterError,
                exit_status.ProcessesDisagree,
            ),
        ):
            # Every process raises a disagreement at once: a peer's "failed"
            # beat must not turn this process's error into a RESTART.
            self._failing = True
            self._stop.set()
            return
        self._failing = True
        self._state = "failed"  # peers failing the same way see it at once
        self._beat()
        deadline = time.monotonic() + self.options.peer_dead_after_seconds
        while time.monotonic() < deadline:
            if self._dead_peer is not None or self._all_peers_failed():
                break
            time.sleep(0.2)
        if self._dead_peer is not None:
            self._restart(f"process {self._dead_peer} is dead")
        if _is_collective_error(exc):
            self._restart(
                f"a collective failed ({type(exc).__name__}: {str(exc)[:120]}); "
                f"the peer lost is most likely {self._suspect()}"
            )

    # --- beats and the watch ------------------------------------------------------

    _dead_peer: int | None = None
    # This process is ending on an error of its own: a peer whose last beat
    # says "failed" did too (the same data error, typically), which is no
    # reason to restart the slice.
    _failing = False

    def _start_watch(self) -> None:
        if self._thread is not None:
            return
        self._started = time.monotonic()
        self._beat()
        self._thread = threading.Thread(
            target=self._watch, name="colab-resume-peer-watch", daemon=True
        )
        self._thread.start()

    def _interval(self) -> float:
        return max(0.2, self.options.peer_dead_after_seconds / 5)

    def _beat(self) -> None:
        if not self.lease:
            return
        self._seq += 1
        record = {
            "process": self.index,
            "processes": self.count,
            "lease": self.lease,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "step": self._step,
            "state": self._state,
            "seq": self._seq,
            "time": time.time(),
        }
        try:
            self.storage.write_json(
                rundir.process_heartbeat_path(self.lease, self.index), record
            )
        except Exception as exc:  # a missed beat; the next one may land
            log.warning("process beat failed: %s", exc)

    def _watch(self) -> None:
        while not self._stop.wait(self._interval()):
            self._beat()
            for peer in range(self.count):
                if peer != self.index and self._peer_dead(peer):
                    if self._stop.is_set():
                        return  # this process is ending (on its own error)
                    self._dead_peer = peer
                    self._restart(f"process {peer} is dead")
                    return

    def _peer_dead(self, peer: int) -> bool:
        now = time.monotonic()
        try:
            beat: Any = self.storage.read_json(
                rundir.process_heartbeat_path(self.lease, peer)
            )
        except (FileNotFoundError, CorruptRecordError):
            beat = None
        except Exception:  # storage trouble is not a peer's death
            return False
        state = beat.get("state") if isinstance(beat, dict) else None
        self._states[peer] = state
        if isinstance(beat, dict) and isinstance(beat.get("host"), str):
            self._hosts[peer] = beat["host"][:100]
        if state == "restart":
            return True
        if state == "failed":
            if self._failing:
                return False  # it ended on its own error, as this process does
            # All processes see a disagreement at the same collective: this
            # one may be a moment from raising it too. A peer that failed
            # alone is dead to this process once that moment has passed.
            first = self._failed_since.setdefault(peer, now)
            return now - first >= 2 * self._interval()
        mark = beat.get("seq") if isinstance(beat, dict) else None
        seen = self._seen.get(peer)
        if seen is None or seen[0] != mark:
            self._seen[peer] = (mark, now)
            return False
        if isinstance(beat, dict) and beat.get("state") in ("completed", "stopped"):
            return False
        return now - seen[1] > self.options.peer_dead_after_seconds

    def _suspect(self) -> str:
        """The peer a failed collective most likely lost: the one whose beat
        moved least recently (by this process's clock), named with its host."""
        now = time.monotonic()
        peers = [k for k in range(self.count) if k != self.index]

        def silence(peer: int) -> float:
            seen = self._seen.get(peer)
            return now - seen[1] if seen is not None else float("inf")

        peer = max(peers, key=silence)
        host = self._hosts.get(peer)
        name = f"process {peer}" + (f" on {host}" if host else "")
        if peer == 0:
            name += " (the coordinator)"
        quiet = silence(peer)
        if quiet == float("inf"):
            return f"{name}, never heard from"
        return f"{name}, whose beat last moved {quiet:.1f}s ago"

    def _all_peers_failed(self) -> bool:
        peers = [k for k in range(self.count) if k != self.index]
        return all(self._states.get(k) == "failed" for k in peers)

    def _restart(self, why: str) -> None:
        """End this process now with RESTART (JAX's shutdown would wait on the dead)."""
        if not self._ending.acquire(blocking=False):
            # The watch and the training thread can both get here; the
            # first ends the process, while process 0 awaits its peers.
            threading.Event().wait()
        message = (
            f"process {self.index} of {self.count}: {why}; exiting with "
            f"{exit_status.RESTART} (restart every process: they resume from "
            f"the last committed step)"
        )
        self.events.emit("run.peer_lost", message, level="error", step=self._step)
        print(message, file=sys.stderr, flush=True)
        self._state = "restart"
        self._beat()
        if self.leads:
            self._await_peers_ending()
        logging.shutdown()
        os._exit(exit_status.RESTART)

    def _await_peers_ending(self) -> None:
        """Process 0 hosts JAX's coordination service, and its end aborts
        every process still connected to it (SIGABRT, not RESTART): wait,
        within a bound, until every other survivor has said it ends (it does
        at its next watch, on this process's "restart" beat)."""
        deadline = time.monotonic() + 3 * self._interval() + 1.0
        pending = set(range(self.count)) - {self.index, self._dead_peer}
        while pending and time.monotonic() < deadline:
            for peer in sorted(pending):
                try:
                    beat = self.storage.read_json(
                        rundir.process_heartbeat_path(self.lease, peer)
                    )
                except Exception:  # unreadable: judged again until the bound
                    continue
                if isinstance(beat, dict) and beat.get("state") in ENDING:
                    pending.discard(peer)
            time.sleep(0.1)
        time.sleep(ENDING_GRACE_SECONDS)


def _is_collective_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(
        mark in text
        for mark in ("Gloo", "Connection closed by peer", "Connection reset by peer")
    )


def start_settings(storage: Storage, options: AgentOptions) -> dict[str, str]:
    """What every process must be started with alike, as it was given."""
    triggers, kept = options.triggers, options.checkpoints
    return {
        "the run directory": storage.url,
        "save_every_steps": str(triggers.every_steps),
        "save_every_seconds": str(triggers.every_seconds),
        "keep": str(kept.keep),
        "keep_every_steps": str(kept.keep_every_steps),
        "the checkpoint format": kept.format,
        "the Keras backend": os.environ.get("KERAS_BACKEND", ""),
    }


def start(
    storage: Storage,
    options: DistributedOptions,
    events: EventLog,
    *,
    cpu_devices: int,
    prefer: str,
) -> MultiHost | None:
    """Start JAX's distributed runtime when asked (or the environment says so).

    Returns:
        This process's part, or None for a single-process run.

    Raises:
        ClusterError: incomplete settings, or a host-local run directory
            with the processes on several machines.
    """
    cluster = jax_distributed.resolve(options)
    if cluster is None:
        return None
    from colab_resume.backend import jax as jax_backend

    if prefer in ("auto", "cpu"):
        jax_backend.request_cpu_devices(cpu_devices)
    # JAX's own heartbeat timeout aborts a process: ours must come first.
    timeout = int(max(100.0, 4 * options.peer_dead_after_seconds))
    facts = jax_distributed.start(
        cluster,
        heartbeat_timeout_seconds=timeout,
        start_timeout_seconds=options.start_timeout_seconds,
    )
    jax_distributed.set_data_sharding(options.data_sharding)
    if storage.protocol in LOCAL_SCHEMES and not facts.same_machine:
        raise jax_distributed.ClusterError(
            f"run_dir {storage.url!r} is a host-local path, but the {facts.count} "
            f"processes run on several machines: each would see its own copy. "
            f"Use a bucket every host reaches, e.g. gs://BUCKET/runs/NAME."
        )
    events.emit(
        "run.processes",
        f"process {facts.index} of {facts.count} ({facts.local_devices} of "
        f"{facts.global_devices} devices; settings from {cluster.source})",
    )
    return MultiHost(storage, facts, options, events)


class FollowerSession:
    """What a process other than 0 has instead of the lease: its own beat.

    It holds no lease (process 0 does) and is never fenced on its own: a
    newer slice fences process 0, whose commits are the only ones.
    """

    def __init__(self, host: MultiHost) -> None:
        self.host = host

    @property
    def lease(self) -> int:
        return self.host.lease

    @property
    def session_id(self) -> str:
        return f"p{self.host.index}"

    def update(self, **fields: Any) -> None:
        if isinstance(fields.get("step"), int):
            self.host._step = fields["step"]
        if isinstance(fields.get("state"), str):
            self.host._state = fields["state"]

    def check(self) -> None:
        """Never fenced on its own (see the class docstring)."""

    def fence(self) -> None:
        """Commits are process 0's; nothing of this process needs a fence."""

    def complete(self, summary: dict[str, Any] | None = None) -> None:
        self.host.beat_end("completed")

    def close(self, state: str = "stopped", error: str | None = None) -> None:
        self.host.beat_end(state)

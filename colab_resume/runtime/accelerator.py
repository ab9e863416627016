"""Pick the accelerator, build its ``tf.distribute.Strategy``, rebuild it after a loss.

:class:`Accelerator` holds one connection (what the agent owns);
:func:`connect` and :func:`reconnect` are the notebook-friendly functions
over a process-wide one, mirroring TensorFlow, whose TPU system and logical
devices are process-wide too.

``prefer="auto"`` tries TPU, then GPU, then CPU, and reports every step
down as a warning event saying why. A machine that *has* a TPU or GPU but
a TensorFlow that cannot use it (missing ``tensorflow-tpu``, a CPU-only
build, the TPU held by another process) raises instead of falling back:
hours of training on the CPU by mistake cost more than a clear error.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from colab_resume import backend
from colab_resume.events import EventLog
from colab_resume.runtime import diagnose, local, precision, tpu
from colab_resume.runtime.detect import GPU, RuntimeInfo, detect
from colab_resume.runtime.errors import (
    AcceleratorError,
    AcceleratorNotFoundError,
    AcceleratorUnavailableError,
)
from colab_resume.runtime.options import ConnectOptions

log = logging.getLogger(__name__)

# Where a remote TPU worker must write checkpoints: the local host (docs/DESIGN.md §2).
REMOTE_IO_DEVICE = "/job:localhost"


@dataclasses.dataclass(frozen=True)
class Connection:
    """What ``connect`` connected to, for the panel, heartbeats and checkpoints.

    Attributes:
        kind: ``"tpu"``, ``"gpu"`` or ``"cpu"``.
        replicas: ``strategy.num_replicas_in_sync``.
        precision: the Keras global policy that was set.
        chip_type: ``"v5e-1"``, ``"NVIDIA T4"``, ``"cpu"``...
        tpu_target: the resolver target on TPU (``"local"``, a name...).
        io_device: pass as ``tf.train.CheckpointOptions(experimental_io_device=)``
            when saving (set for remote TPU workers, else None).
        fallback_reason: why ``prefer="auto"`` did not get a better kind.
    """

    kind: str
    replicas: int
    precision: str
    chip_type: str
    tpu_target: str | None = None
    io_device: str | None = None
    fallback_reason: str | None = None

    @property
    def label(self) -> str:
        """One line for humans, e.g. ``"TPU v5e-1 x1 (mixed_bfloat16)"``."""
        chip = "" if self.chip_type == self.kind else f" {self.chip_type}"
        return f"{self.kind.upper()}{chip} x{self.replicas} ({self.precision})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Platform:
    """Everything outside this process that connecting touches; for tests.

    Defaults are the real machine. Tests replace what cannot run here (the
    TPU) and what must not leak into other tests (Keras' global policy).

    Attributes:
        env: environment variables (None: ``os.environ`` at connect time).
        root: filesystem root for device files.
        module_available: whether a module is importable (no import).
        tpu_api: the TensorFlow TPU calls (None: real TensorFlow).
        set_precision: sets Keras' global dtype policy (the package's choice).
        keep_precision: sets it again to the policy the user had set.
        user_precision: the policy the user set before connecting, or None.
        clear_session: resets Keras' global state.
        sleep: waits between TPU connection attempts.
        clock: monotonic seconds for the TPU connection deadline.
        lock_path: libtpu's lock file.
        proc_root: where procfs is mounted (to find the TPU's holder).
    """

    env: Mapping[str, str] | None = None
    root: str = "/"
    module_available: Callable[[str], bool] | None = None
    tpu_api: tpu.TPUApi | None = None
    set_precision: Callable[[str], None] = precision.apply_policy
    keep_precision: Callable[[str], None] = precision.keep_policy
    user_precision: Callable[[], str | None] = precision.user_policy
    clear_session: Callable[[], None] = precision.clear_session
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    lock_path: str = diagnose.LIBTPU_LOCK_PATH
    proc_root: str = "/proc"


class Accelerator:
    """One connection to this machine's accelerator, rebuilt after losses.

    Args:
        options: what to connect to and how (validated on construction).
        events: where attempts, retries and fallbacks are reported.
        platform: injectable surroundings; the real machine by default.
    """

    def __init__(
        self,
        options: ConnectOptions | None = None,
        *,
        events: EventLog | None = None,
        platform: Platform | None = None,
    ):
        self.options = options or ConnectOptions()
        self.platform = platform or Platform()
        self._events = events
        self._strategy: Any = None
        self._connection: Connection | None = None
        self._resolver: Any = None
        self._tpu_api: tpu.TPUApi | None = None
        self._info: RuntimeInfo | None = None
        # The policy the user had set when connect() first ran: read once,
        # since clear_session() on a reconnect resets Keras' global policy.
        self._users_policy: str | None = None

    @property
    def strategy(self) -> Any:
        """The current strategy, or None before :meth:`connect`."""
        return self._strategy

    @property
    def connection(self) -> Connection | None:
        """What is connected, or None before :meth:`connect`."""
        return self._connection

    def _emit(self, kind: str, message: str, **kw: Any) -> None:
        if self._events is not None:
            self._events.emit(kind, message, **kw)
        else:
            level = logging.WARNING if kw.get("level") == "warning" else logging.INFO
            log.log(level, "%s: %s", kind, message)

    def _tensorflow(self) -> Any:
        return diagnose.import_tensorflow(self._info)

    # --- one kind each --------------------------------------------------------

    def _connect_tpu(self, info: RuntimeInfo, fallback: str | None) -> Any:
        p = self.platform
        target = self.options.tpu if self.options.tpu is not None else info.tpu_target
        assert target is not None
        remote = target not in ("", "local")
        if not remote and self._resolver is None:
            # Before TensorFlow touches the TPU: if another process holds it,
            # TensorFlow would only say "no TPU found".
            holders = diagnose.tpu_lock_holders(
                p.lock_path, proc_root=p.proc_root, device_files=info.tpu_devices
            )
            if holders:
                raise diagnose.tpu_in_use_error(
                    holders, lock_path=p.lock_path, proc_root=p.proc_root
                )
        if self._tpu_api is None:
            self._tpu_api = p.tpu_api or tpu.TensorFlowTPUApi(self._tensorflow)
        strategy, self._resolver = tpu.connect_tpu(
            target,
            remote=remote,
            api=self._tpu_api,
            options=self.options,
            diagnose=functools.partial(
                diagnose.diagnose_tpu_failure,
                info=info,
                lock_path=p.lock_path,
                proc_root=p.proc_root,
            ),
            events=self._events,
            sleep=p.sleep,
            clock=p.clock,
        )
        return self._finish(
            strategy,
            kind="tpu",
            chip=info.accelerator_type or "tpu",
            tpu_target=target,
            io_device=REMOTE_IO_DEVICE if remote else None,
            fallback=fallback,
        )

    def _connect_gpu(self, info: RuntimeInfo, fallback: str | None) -> Any:
        tf = self._tensorflow()
        diagnose.check_gpu_build(tf, info)
        try:
            strategy, gpus = local.gpu_strategy(tf)
        except AcceleratorNotFoundError as exc:
            if info.gpu_runtime:  # a driver but no GPU for TensorFlow: fixable
                raise diagnose.gpu_not_visible_error(tf, info) from exc
            raise
        policy = self._policy("gpu")
        low = [
            g
            for g in gpus
            if g.compute_capability
            and g.compute_capability < precision.FLOAT16_MIN_COMPUTE_CAPABILITY
        ]
        if policy == "mixed_float16" and low:
            self._emit(
                "runtime.precision",
                f"mixed_float16 on {low[0].name} (compute capability "
                f"{low[0].compute_capability}) has no float16 tensor cores and "
                f"may be slower than float32",
                level="warning",
            )
        return self._finish(strategy, kind="gpu", chip=gpus[0].name, fallback=fallback)

    def _connect_cpu(self, fallback: str | None) -> Any:
        strategy = local.cpu_strategy(self._tensorflow(), self.options.cpu_replicas)
        return self._finish(strategy, kind="cpu", chip="cpu", fallback=fallback)

    def _connect_jax(self, *, fresh: bool = False) -> Any:
        """Keras on JAX: a ``DataParallel`` distribution, no TensorFlow.

        Args:
            fresh: after a loss: drop JAX's compiled programs for the old
                devices first.
        """
        from colab_resume.backend import jax as jax_backend

        if fresh:
            jax_backend.forget_compiled()
        p = self.platform
        info = self._info = detect(
            p.env, root=p.root, module_available=p.module_available
        )
        made = jax_backend.connect(self.options.prefer, self.options.cpu_replicas)
        if info.is_tpu and made.kind != "tpu" and self.options.prefer == "auto":
            # JAX falls back to the CPU by itself when the TPU is taken or
            # libtpu is missing: hours on the CPU by mistake cost more than this.
            raise diagnose.jax_tpu_unusable_error(
                info, made.kind, lock_path=p.lock_path, proc_root=p.proc_root
            )
        return self._finish(
            made.distribution, kind=made.kind, chip=made.chip, replicas=made.replicas
        )

    def _finish(
        self,
        strategy: Any,
        *,
        kind: str,
        chip: str,
        tpu_target: str | None = None,
        io_device: str | None = None,
        fallback: str | None = None,
        replicas: int | None = None,
    ) -> Any:
        policy = self._policy(kind)
        if policy == self._users_policy:
            self.platform.keep_precision(policy)
        else:
            self.platform.set_precision(policy)
        if self._connection is None:  # said once, not again on a reconnect
            line = precision.describe_choice(
                self.options.precision, kind, self._users_policy, policy
            )
            if line:
                self._emit("runtime.precision", line, policy=policy)
        self._strategy = strategy
        self._connection = Connection(
            kind=kind,
            replicas=replicas or int(strategy.num_replicas_in_sync),
            precision=policy,
            chip_type=chip,
            tpu_target=tpu_target,
            io_device=io_device,
            fallback_reason=fallback,
        )
        self._emit(
            "runtime.connected",
            f"connected: {self._connection.label}",
            connection=dataclasses.asdict(self._connection),
        )
        return strategy

    def _policy(self, kind: str) -> str:
        return precision.resolve_precision(
            self.options.precision, kind, self._users_policy
        )

    # --- choosing -------------------------------------------------------------

    def _fall_back(self, reasons: list[str], to: str) -> str:
        reason = "; ".join(reasons)
        self._emit(
            "runtime.fallback",
            f"prefer='auto': {reason}. Using the {to.upper()} instead.",
            level="warning",
            reason=reason,
            to=to,
        )
        return reason

    def _connect_auto(self, info: RuntimeInfo) -> Any:
        # A GPU runtime without a TPU is what the user chose: no warning. A
        # TPU that failed, or ending up on the CPU, is worth one.
        reasons: list[str] = []
        tpu_failure: str | None = None
        if info.is_tpu or self.options.tpu is not None:
            try:
                return self._connect_tpu(info, None)
            except (AcceleratorUnavailableError, AcceleratorNotFoundError) as exc:
                tpu_failure = f"TPU failed: {str(exc).rstrip('.')}"
                reasons.append(tpu_failure)
        else:
            reasons.append(
                "no TPU found (no COLAB_TPU_ADDR, TPU_NAME, COLAB_TPU_1VM, "
                "TPU_ACCELERATOR_TYPE, /dev/accel*, /dev/vfio/<n>)"
            )
        tf = self._tensorflow()
        if info.gpu_runtime or tf.config.list_physical_devices("GPU"):
            try:
                strategy = self._connect_gpu(info, tpu_failure)
            except AcceleratorNotFoundError as exc:
                reasons.append(f"GPU failed: {str(exc).rstrip('.')}")
            else:
                if tpu_failure:
                    self._fall_back([tpu_failure], "gpu")
                return strategy
        else:
            reasons.append("no GPU found (no /dev/nvidiactl, TensorFlow lists none)")
        return self._connect_cpu(self._fall_back(reasons, "cpu"))

    def connect(self) -> Any:
        """Connect (once) and return the ``tf.distribute.Strategy``.

        Idempotent: later calls return the same strategy; use
        :meth:`reconnect` after a loss.

        Raises:
            AcceleratorNotFoundError: the kind forced by ``prefer`` is absent.
            AcceleratorUnavailableError: the TPU kept failing until the deadline.
            TPUSupportMissingError, TPUInUseError, TPUNameRequiredError,
            GPUSupportMissingError, TensorFlowNotInstalledError,
            LogicalDevicesError: see their messages for the fix.
        """
        if self._strategy is not None:
            return self._strategy
        if self._connection is None:
            self._users_policy = self.platform.user_precision()
        if backend.is_jax():
            return self._connect_jax()
        p = self.platform
        info = self._info = detect(
            p.env, root=p.root, module_available=p.module_available
        )
        self._emit(
            "runtime.detected",
            f"runtime: {info.kind}{' (Colab)' if info.in_colab else ''}; {info.signs}",
            runtime=dataclasses.asdict(info),
        )
        prefer = self.options.prefer
        if prefer == "auto":
            return self._connect_auto(info)
        if prefer == "tpu":
            if not info.is_tpu and self.options.tpu is None:
                raise AcceleratorNotFoundError(
                    f"prefer='tpu' but this machine shows no TPU ({info.signs}: no "
                    f"COLAB_TPU_ADDR, TPU_NAME, COLAB_TPU_1VM, TPU_ACCELERATOR_TYPE, "
                    f"/dev/accel*, /dev/vfio/<n>). Choose a TPU runtime (Colab: "
                    f"Runtime > Change runtime type), pass tpu='name' for a Cloud "
                    f"TPU, or prefer='auto'."
                )
            return self._connect_tpu(info, None)
        if prefer == "gpu":
            if info.kind != GPU and not info.gpu_runtime:
                tf = self._tensorflow()
                if not tf.config.list_physical_devices("GPU"):
                    raise AcceleratorNotFoundError(
                        f"prefer='gpu' but this machine shows no GPU ({info.signs}; "
                        f"no /dev/nvidiactl and TensorFlow lists none). Choose a GPU "
                        f"runtime (Colab: Runtime > Change runtime type) or "
                        f"prefer='auto'."
                    )
            return self._connect_gpu(info, None)
        return self._connect_cpu(None)

    def reconnect(self) -> Any:
        """Rebuild the strategy after an accelerator loss; return the new one.

        On TPU: shut the TPU system down (best effort: the worker may be
        gone), reset Keras' global state, and connect again with the same
        retries and deadline; initialising wipes every TPU variable, so the
        caller must rebuild model and optimizer in the new ``strategy.scope()``
        and restore them from a checkpoint. On GPU/CPU: reset Keras' global
        state and build a fresh strategy of the same kind. In both cases the
        precision policy is set again (``clear_session`` resets it).

        Raises:
            AcceleratorError: not connected yet, or connecting again failed.
        """
        jax = backend.is_jax()  # JAX connects without detecting (no _info)
        if self._connection is None or (self._info is None and not jax):
            raise AcceleratorError(
                "reconnect() before connect(): call connect() first; reconnect "
                "rebuilds the accelerator connect() chose."
            )
        previous = self._connection
        self._emit(
            "runtime.reconnect",
            f"reconnecting {previous.label} after an accelerator loss",
            level="warning",
            connection=dataclasses.asdict(previous),
        )
        if previous.kind == "tpu" and self._tpu_api is not None:
            tpu.shutdown_tpu(self._tpu_api, self._resolver, self._events)
        self.platform.clear_session()
        self._strategy = None
        if jax:
            return self._connect_jax(fresh=True)
        assert self._info is not None
        if previous.kind == "tpu":
            return self._connect_tpu(self._info, previous.fallback_reason)
        if previous.kind == "gpu":
            return self._connect_gpu(self._info, previous.fallback_reason)
        return self._connect_cpu(previous.fallback_reason)


# --- the process-wide connection ------------------------------------------------

_lock = threading.Lock()
_current: Accelerator | None = None


def connect(
    prefer: str = "auto",
    cpu_replicas: int = 1,
    precision: str = "auto",
    *,
    tpu: str | None = None,
    deadline_seconds: float = 300.0,
    events: EventLog | None = None,
    platform: Platform | None = None,
) -> Any:
    """Connect to the best (or the preferred) accelerator; return its strategy.

    Calling it again with the same arguments returns the same strategy.

    Args:
        prefer: ``"auto"`` (TPU, then GPU, then CPU), ``"tpu"``, ``"gpu"`` or
            ``"cpu"``.
        cpu_replicas: on the CPU, the number of logical devices for a
            ``MirroredStrategy`` (1: ``OneDeviceStrategy``).
        precision: ``"auto"``, ``"float32"``, ``"mixed_bfloat16"`` or
            ``"mixed_float16"``; set as Keras' global policy.
        tpu: the ``TPUClusterResolver`` target, overriding detection.
        deadline_seconds: how long to keep retrying an unreachable TPU.
        events: where attempts, retries and fallbacks are reported.
        platform: injectable surroundings (tests).

    Returns:
        The ``tf.distribute.Strategy``; :func:`current_connection` describes it.

    Raises:
        ConnectOptionError: a bad argument (the message names it).
        AcceleratorError: see :meth:`Accelerator.connect`.
    """
    global _current
    options = ConnectOptions(
        prefer=prefer,
        cpu_replicas=cpu_replicas,
        precision=precision,
        tpu=tpu,
        deadline_seconds=deadline_seconds,
    )
    with _lock:
        current = _current
        if (
            current is not None
            and current.strategy is not None
            and current.options == options
            and current.platform == (platform or Platform())
            and (events is None or events is current._events)
        ):
            return current.strategy
        accelerator = Accelerator(options, events=events, platform=platform)
        strategy = accelerator.connect()
        _current = accelerator
        return strategy


def reconnect() -> Any:
    """Rebuild the process-wide connection after an accelerator loss.

    See :meth:`Accelerator.reconnect`.

    Raises:
        AcceleratorError: :func:`connect` was never called, or it failed again.
    """
    with _lock:
        if _current is None:
            raise AcceleratorError(
                "reconnect() before connect(): call connect() first; reconnect "
                "rebuilds the accelerator connect() chose."
            )
        return _current.reconnect()


def current_connection() -> Connection | None:
    """What the process-wide :func:`connect` connected to, or None."""
    current = _current
    return current.connection if current is not None else None

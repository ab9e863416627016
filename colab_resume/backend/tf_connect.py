"""TensorFlow's connection: a ``tf.distribute.Strategy`` on a TPU, GPUs or the CPU.

``prefer="auto"`` tries TPU, then GPU, then CPU, and reports every step
down as a warning event saying why. A machine that *has* a TPU or GPU but
a TensorFlow that cannot use it (missing ``tensorflow-tpu``, a CPU-only
build, the TPU held by another process) raises instead of falling back:
hours of training on the CPU by mistake cost more than a clear error.

What the machine is (a TPU VM, a GPU runtime, Colab) is
:mod:`colab_resume.runtime`'s to say; this module only turns it into a
strategy, with TensorFlow, and rebuilds that strategy after a loss.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import weakref
from typing import TYPE_CHECKING, Any

from colab_resume.backend import tf_devices, tf_tpu
from colab_resume.backend.install import import_tensorflow
from colab_resume.runtime import diagnose, precision
from colab_resume.runtime.detect import GPU, RuntimeInfo, detect
from colab_resume.runtime.errors import (
    AcceleratorNotFoundError,
    AcceleratorUnavailableError,
)

# Annotations only, never imported at run time: the accelerator makes this
# connector and the connector calls back into it.
if TYPE_CHECKING:
    from colab_resume.backend.connector import Connecting
    from colab_resume.runtime.connection import Connection

# Where a remote TPU worker must write checkpoints: the local host (docs/DESIGN.md §2).
REMOTE_IO_DEVICE = "/job:localhost"

# The strategies connectors made: any other one in scope is the user's.
_MADE: weakref.WeakSet[Any] = weakref.WeakSet()

NO_TPU_SIGNS = (
    "no COLAB_TPU_ADDR, TPU_NAME, COLAB_TPU_1VM, TPU_ACCELERATOR_TYPE, "
    "/dev/accel*, /dev/vfio/<n>"
)


class TensorFlowConnector:
    """Connects one accelerator (:class:`~colab_resume.backend.connector.Connecting`)
    with TensorFlow, and again after a loss.

    Holds what a reconnect needs again: what detection found, the TPU
    resolver and the TPU calls.
    """

    def __init__(self, accelerator: Connecting):
        self._accelerator = accelerator
        self._info: RuntimeInfo | None = None
        self._resolver: Any = None
        self._tpu_api: tf_tpu.TPUApi | None = None
        # The user's strategy and how it came ("passed", "entered"), if any.
        self._users: tuple[Any, str] | None = None

    def _tensorflow(self) -> Any:
        return import_tensorflow(self._info)

    # --- the Connector protocol ----------------------------------------------

    def connect(self) -> Any:
        """Detect the machine and connect what ``prefer`` asks for, or keep
        the strategy the user passed or entered the scope of."""
        self._users = _users_strategy(self._accelerator.options.strategy)
        if self._users is not None:
            return self._keep(*self._users)
        strategy = self._connect()
        _MADE.add(strategy)
        self._say_built(strategy)
        return strategy

    def _say_built(self, strategy: Any) -> None:
        """The ``runtime.strategy`` event for a strategy the agent built."""
        name = type(strategy).__name__
        detail = f"{int(strategy.num_replicas_in_sync)} replicas"
        if tf_devices.is_default(strategy):
            name, detail = "TensorFlow's default strategy", "one device, as plain Keras"
        elif name == "OneDeviceStrategy":
            detail = "pinned to the CPU beside a GPU"
        self._accelerator.emit(
            "runtime.strategy",
            f"training under {name} ({detail}), built by the agent: pass "
            f"strategy= (or enter your strategy's scope) to train under your own",
            strategy=type(strategy).__name__,
            given="built by the agent",
        )

    def _connect(self) -> Any:
        a = self._accelerator
        p = a.platform
        info = self._info = detect(
            p.env, root=p.root, module_available=p.module_available
        )
        a.emit(
            "runtime.detected",
            f"runtime: {info.kind}{' (Colab)' if info.in_colab else ''}; {info.signs}",
            runtime=dataclasses.asdict(info),
        )
        prefer = a.options.prefer
        if prefer == "auto":
            return self._connect_auto(info)
        if prefer == "tpu":
            if not info.is_tpu and a.options.tpu is None:
                raise AcceleratorNotFoundError(
                    f"prefer='tpu' but this machine shows no TPU ({info.signs}: "
                    f"{NO_TPU_SIGNS}). Choose a TPU runtime (Colab: "
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

    def release(self, previous: Connection) -> None:
        """Before Keras' state is cleared: shut the lost TPU system down
        (best effort: the worker may be gone)."""
        if previous.kind == "tpu" and self._tpu_api is not None:
            tf_tpu.shutdown_tpu(self._tpu_api, self._resolver, self._accelerator.events)

    def reconnect(self, previous: Connection) -> Any:
        """The same kind as before, with the same retries and deadline (the
        user's own strategy as it is: the agent cannot make it again)."""
        if self._users is not None:
            return self._keep(*self._users)
        strategy = self._reconnect(previous)
        _MADE.add(strategy)
        return strategy

    def _reconnect(self, previous: Connection) -> Any:
        assert self._info is not None, "connect() ran before any reconnect"
        if previous.kind == "tpu":
            return self._connect_tpu(self._info, previous.fallback_reason)
        if previous.kind == "gpu":
            return self._connect_gpu(self._info, previous.fallback_reason)
        return self._connect_cpu(previous.fallback_reason)

    def _keep(self, strategy: Any, how: str) -> Any:
        """Train under the user's ``strategy``, said in a ``runtime.strategy`` event."""
        a = self._accelerator
        devices = [str(d).upper() for d in strategy.extended.worker_devices]
        kind = next(
            (k for k in ("tpu", "gpu") if any(f"{k.upper()}:" in d for d in devices)),
            "cpu",
        )
        a.emit(
            "runtime.strategy",
            f"training under the {type(strategy).__name__} the user {how} "
            f"({int(strategy.num_replicas_in_sync)} replicas on {kind.upper()}), "
            f"kept: the agent builds its own strategy only when none is given",
            strategy=type(strategy).__name__,
            given=how,
        )
        return a.finish(strategy, kind=kind, chip=kind)

    # --- one kind each --------------------------------------------------------

    def _connect_tpu(self, info: RuntimeInfo, fallback: str | None) -> Any:
        a = self._accelerator
        p = a.platform
        target = a.options.tpu if a.options.tpu is not None else info.tpu_target
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
            self._tpu_api = p.tpu_api or tf_tpu.TensorFlowTPUApi(self._tensorflow)
        strategy, self._resolver = tf_tpu.connect_tpu(
            target,
            remote=remote,
            api=self._tpu_api,
            options=a.options,
            diagnose=functools.partial(
                diagnose.diagnose_tpu_failure,
                info=info,
                lock_path=p.lock_path,
                proc_root=p.proc_root,
            ),
            events=a.events,
            sleep=p.sleep,
            clock=p.clock,
        )
        return a.finish(
            strategy,
            kind="tpu",
            chip=info.accelerator_type or "tpu",
            tpu_target=target,
            io_device=REMOTE_IO_DEVICE if remote else None,
            fallback=fallback,
        )

    def _connect_gpu(self, info: RuntimeInfo, fallback: str | None) -> Any:
        a = self._accelerator
        tf = self._tensorflow()
        diagnose.check_gpu_build(tf, info)
        try:
            strategy, gpus = tf_devices.gpu_strategy(tf)
        except AcceleratorNotFoundError as exc:
            if info.gpu_runtime:  # a driver but no GPU for TensorFlow: fixable
                raise diagnose.gpu_not_visible_error(tf, info) from exc
            raise
        policy = a.policy("gpu")
        low = [
            g
            for g in gpus
            if g.compute_capability
            and g.compute_capability < precision.FLOAT16_MIN_COMPUTE_CAPABILITY
        ]
        if policy == "mixed_float16" and low:
            a.emit(
                "runtime.precision",
                f"mixed_float16 on {low[0].name} (compute capability "
                f"{low[0].compute_capability}) has no float16 tensor cores and "
                f"may be slower than float32",
                level="warning",
            )
        return a.finish(strategy, kind="gpu", chip=gpus[0].name, fallback=fallback)

    def _connect_cpu(self, fallback: str | None) -> Any:
        a = self._accelerator
        strategy = tf_devices.cpu_strategy(self._tensorflow(), a.options.cpu_replicas)
        return a.finish(strategy, kind="cpu", chip="cpu", fallback=fallback)

    # --- choosing -------------------------------------------------------------

    def _fall_back(self, reasons: list[str], to: str) -> str:
        reason = "; ".join(reasons)
        self._accelerator.emit(
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
        if info.is_tpu or self._accelerator.options.tpu is not None:
            try:
                return self._connect_tpu(info, None)
            except (AcceleratorUnavailableError, AcceleratorNotFoundError) as exc:
                tpu_failure = f"TPU failed: {str(exc).rstrip('.')}"
                reasons.append(tpu_failure)
        else:
            reasons.append(f"no TPU found ({NO_TPU_SIGNS})")
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


def _users_strategy(passed: Any) -> tuple[Any, str] | None:
    """The user's strategy: the one passed as ``strategy=``, else one whose
    ``scope()`` is entered around the call (not one a connector made)."""
    if passed is not None:
        return passed, "passed"
    tf = sys.modules.get("tensorflow")  # nothing entered before TF's import
    if tf is None or not tf.distribute.has_strategy():
        return None
    entered = tf.distribute.get_strategy()
    return None if entered in _MADE else (entered, "entered")

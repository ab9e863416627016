"""One connection to this machine's accelerator, rebuilt after a loss.

:class:`Accelerator` holds one connection (what the agent owns);
:func:`connect` and :func:`reconnect` are the notebook-friendly functions
over a process-wide one, mirroring TensorFlow, whose TPU system and logical
devices are process-wide too.

What differs between the frameworks is a
:class:`~colab_resume.backend.connector.Connector`, asked of the current
backend once: TensorFlow's (:mod:`colab_resume.backend.tf_connect`)
detects the machine and builds a ``tf.distribute.Strategy`` on the TPU, the
GPUs or the CPU; JAX's (in :mod:`colab_resume.backend.jax`) builds a
``keras.distribution.DataParallel``. What is the same is here: the
precision policy, the ``runtime.connected`` event, the reconnect sequence.

The top of the backend package: it asks :func:`~colab_resume.backend.current`,
which imports the backends; they see an accelerator through
:class:`~colab_resume.backend.connector.Connecting` and import nothing here.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from colab_resume.backend.connector import Connector, Platform
from colab_resume.backend.current import current as current_backend
from colab_resume.events import EventLog
from colab_resume.runtime import precision
from colab_resume.runtime.connection import Connection
from colab_resume.runtime.errors import AcceleratorError
from colab_resume.runtime.options import ConnectOptions

log = logging.getLogger(__name__)

__all__ = [
    "Accelerator",
    "Connector",
    "Platform",
    "connect",
    "current_connection",
    "reconnect",
]


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
        self.events = events
        self._strategy: Any = None
        self._connection: Connection | None = None
        self._connector: Connector | None = None
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

    @property
    def connector(self) -> Connector:
        """The current backend's :class:`Connector` for this accelerator (made
        on first use, then kept: a reconnect needs what it found)."""
        if self._connector is None:
            self._connector = current_backend().connector(self)
        return self._connector

    def emit(self, kind: str, message: str, **kw: Any) -> None:
        """Report ``kind`` as an event (or a log line without an event log)."""
        if self.events is not None:
            self.events.emit(kind, message, **kw)
        else:
            level = logging.WARNING if kw.get("level") == "warning" else logging.INFO
            log.log(level, "%s: %s", kind, message)

    def finish(
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
        """Set the precision policy, record the connection, report it; return
        ``strategy``. Every connector ends here."""
        policy = self.policy(kind)
        if policy == self._users_policy:
            self.platform.keep_precision(policy)
        else:
            self.platform.set_precision(policy)
        if self._connection is None:  # said once, not again on a reconnect
            line = precision.describe_choice(
                self.options.precision, kind, self._users_policy, policy
            )
            if line:
                self.emit("runtime.precision", line, policy=policy)
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
        self.emit(
            "runtime.connected",
            f"connected: {self._connection.label}",
            connection=dataclasses.asdict(self._connection),
        )
        return strategy

    def policy(self, kind: str) -> str:
        """The precision policy for an accelerator of ``kind``."""
        return precision.resolve_precision(
            self.options.precision, kind, self._users_policy
        )

    def connect(self) -> Any:
        """Connect (once) and return the strategy (TensorFlow) or distribution (JAX).

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
        return self.connector.connect()

    def reconnect(self) -> Any:
        """Rebuild the strategy after an accelerator loss; return the new one.

        On TPU: shut the TPU system down (best effort: the worker may be
        gone), reset Keras' global state, and connect again with the same
        retries and deadline; initialising wipes every TPU variable, so the
        caller must rebuild model and optimizer in the new ``strategy.scope()``
        and restore them from a checkpoint. On GPU/CPU, and on JAX: reset
        Keras' global state and build a fresh one of the same kind. In every
        case the precision policy is set again (``clear_session`` resets it).

        Raises:
            AcceleratorError: not connected yet, or connecting again failed.
        """
        if self._connection is None:
            raise AcceleratorError(
                "reconnect() before connect(): call connect() first; reconnect "
                "rebuilds the accelerator connect() chose."
            )
        previous = self._connection
        self.emit(
            "runtime.reconnect",
            f"reconnecting {previous.label} after an accelerator loss",
            level="warning",
            connection=dataclasses.asdict(previous),
        )
        self.connector.release(previous)
        self.platform.clear_session()
        self._strategy = None
        return self.connector.reconnect(previous)


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
            ``MirroredStrategy`` (1: TensorFlow's default strategy).
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
            and (events is None or events is current.events)
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

"""What a framework's connector and the accelerator it connects see of each other.

:class:`~colab_resume.backend.accelerator.Accelerator` asks the current
backend for a :class:`Connector`; the connector works through
:class:`Connecting`, what an accelerator offers it. Both protocols live
here, below the accelerator and the backends, so that the backends
(:mod:`colab_resume.backend.tf_connect`, :mod:`colab_resume.backend.jax`)
never import the accelerator, which imports the backends' chooser.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from colab_resume.backend import keras_state, tf_tpu
from colab_resume.events import EventLog
from colab_resume.runtime import diagnose
from colab_resume.runtime.connection import Connection
from colab_resume.runtime.options import ConnectOptions


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
    tpu_api: tf_tpu.TPUApi | None = None
    set_precision: Callable[[str], None] = keras_state.apply_policy
    keep_precision: Callable[[str], None] = keras_state.keep_policy
    user_precision: Callable[[], str | None] = keras_state.user_policy
    clear_session: Callable[[], None] = keras_state.clear_session
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    lock_path: str = diagnose.LIBTPU_LOCK_PATH
    proc_root: str = "/proc"


class Connector(Protocol):
    """What one framework does to connect an :class:`Accelerator`
    (``Backend.connector``)."""

    def connect(self) -> Any:
        """Connect what the options ask for; return the strategy or distribution
        (through :meth:`Accelerator.finish`)."""
        ...

    def release(self, previous: Connection) -> None:
        """After a loss, before Keras' state is cleared: let go of the old one."""
        ...

    def reconnect(self, previous: Connection) -> Any:
        """Connect the same kind as ``previous`` again."""
        ...


class Connecting(Protocol):
    """An accelerator as its :class:`Connector` sees it
    (:class:`~colab_resume.backend.accelerator.Accelerator`)."""

    options: ConnectOptions
    platform: Platform
    events: EventLog | None

    def emit(self, kind: str, message: str, **kw: Any) -> None:
        """Report ``kind`` as an event (or a log line)."""
        ...

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
        """Set the precision, record and report the connection; return ``strategy``."""
        ...

    def policy(self, kind: str) -> str:
        """The precision policy for an accelerator of ``kind``."""
        ...

"""What ``connect`` accepts, checked up front."""

from __future__ import annotations

import dataclasses
from typing import Any

from colab_resume.runtime.errors import ConnectOptionError
from colab_resume.validate import check_int, check_seconds

PREFER = ("auto", "tpu", "gpu", "cpu")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


def _choices(values: tuple[str, ...]) -> str:
    return ", ".join(repr(v) for v in values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConnectOptions:
    """How to pick and set up the accelerator.

    Attributes:
        prefer: ``"auto"`` tries TPU, then GPU, then CPU, warning when it
            falls back; ``"tpu"``, ``"gpu"`` or ``"cpu"`` force one kind.
        cpu_replicas: on the CPU, split it into this many logical devices
            under a ``MirroredStrategy`` (rehearse multi-replica TPU code).
        precision: ``"auto"`` (``mixed_bfloat16`` on TPU, ``float32`` on GPU
            and CPU, unless the user set a global policy before connecting,
            which it keeps), or a Keras policy name set as the global policy.
        tpu: override the ``TPUClusterResolver(tpu=...)`` target (``"local"``,
            a TPU name, ``"grpc://ip:port"``); None: from detection.
        strategy: a ``tf.distribute.Strategy`` of the user's (TensorFlow
            only): trained under as it is, ``prefer``, ``cpu_replicas`` and
            ``tpu`` aside; None: the agent builds one (or keeps one whose
            ``scope()`` the user entered around the call).
        deadline_seconds: give up connecting to the TPU after this long.
        initial_backoff_seconds: first wait between TPU connection attempts.
        max_backoff_seconds: cap of one wait.
        max_attempts: give up after this many attempts (None: deadline only).
    """

    prefer: str = "auto"
    cpu_replicas: int = 1
    precision: str = "auto"
    tpu: str | None = None
    strategy: Any = dataclasses.field(default=None, compare=False)
    deadline_seconds: float = 300.0
    initial_backoff_seconds: float = 1.0
    max_backoff_seconds: float = 30.0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if self.prefer not in PREFER:
            raise ConnectOptionError(
                f"prefer must be one of {_choices(PREFER)}, got {self.prefer!r}. "
                f"Use prefer='auto' to take the best accelerator found."
            )
        if self.precision not in PRECISIONS:
            raise ConnectOptionError(
                f"precision must be one of {_choices(PRECISIONS)}, got "
                f"{self.precision!r}. Use precision='auto' for mixed_bfloat16 on "
                f"TPU and float32 elsewhere."
            )
        check_int(
            "cpu_replicas",
            self.cpu_replicas,
            error=ConnectOptionError,
            hint="Use 1 for one CPU device, or e.g. 2 to rehearse a 2-replica "
            "strategy.",
        )
        if self.strategy is not None and not all(
            hasattr(self.strategy, a) for a in ("scope", "num_replicas_in_sync")
        ):
            raise ConnectOptionError(
                f"strategy must be a tf.distribute.Strategy or None, got "
                f"{type(self.strategy).__name__}. Pass e.g. "
                f"tf.distribute.MirroredStrategy(), or leave it out and the "
                f"agent builds one."
            )
        if self.tpu is not None and not isinstance(self.tpu, str):
            raise ConnectOptionError(
                f"tpu must be a string or None, got {self.tpu!r}. Use tpu='local' "
                f"on a TPU VM, or the TPU's name."
            )
        for name in (
            "deadline_seconds",
            "initial_backoff_seconds",
            "max_backoff_seconds",
        ):
            check_seconds(name, getattr(self, name), error=ConnectOptionError)
        check_int(
            "max_attempts", self.max_attempts, optional=True, error=ConnectOptionError
        )

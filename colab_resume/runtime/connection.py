"""What a connect connected to, for the panel, heartbeats and checkpoints."""

from __future__ import annotations

import dataclasses


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

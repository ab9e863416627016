"""JAX's connection: a ``keras.distribution.DataParallel`` over JAX's devices.

No TensorFlow, and no detection first: JAX finds its own devices. What
detection is still asked for is one check, that a TPU machine did get the
TPU (JAX falls back to the CPU by itself when the TPU is taken or libtpu is
missing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from colab_resume.backend import jax as jax_backend
from colab_resume.runtime import diagnose
from colab_resume.runtime.detect import detect

if TYPE_CHECKING:
    from colab_resume.backend.accelerator import Accelerator
    from colab_resume.runtime.connection import Connection


class JaxConnector:
    """Connects one :class:`~colab_resume.backend.accelerator.Accelerator` with JAX."""

    def __init__(self, accelerator: Accelerator):
        self._accelerator = accelerator

    def connect(self, *, fresh: bool = False) -> Any:
        """A ``DataParallel`` distribution over what ``prefer`` asks for.

        Args:
            fresh: after a loss: drop JAX's compiled programs for the old
                devices first.
        """
        a = self._accelerator
        if fresh:
            jax_backend.forget_compiled()
        p = a.platform
        info = detect(p.env, root=p.root, module_available=p.module_available)
        made = jax_backend.connect(a.options.prefer, a.options.cpu_replicas)
        if info.is_tpu and made.kind != "tpu" and a.options.prefer == "auto":
            # Hours on the CPU by mistake cost more than this error.
            raise diagnose.jax_tpu_unusable_error(
                info, made.kind, lock_path=p.lock_path, proc_root=p.proc_root
            )
        return a.finish(
            made.distribution, kind=made.kind, chip=made.chip, replicas=made.replicas
        )

    def release(self, previous: Connection) -> None:
        """Nothing to shut down: JAX's devices are the process'."""
        return None

    def reconnect(self, previous: Connection) -> Any:
        """A fresh distribution over the devices JAX sees now."""
        return self.connect(fresh=True)

"""Importing the frameworks, each failure with what to install.

The one place TensorFlow and Keras are imported for their own sake (to
train), so the install hint for each runtime is written once.
"""

from __future__ import annotations

from types import ModuleType
from typing import cast

from colab_resume.runtime.detect import RuntimeInfo
from colab_resume.runtime.diagnose import RESTART, tpu_install_command
from colab_resume.runtime.errors import TensorFlowNotInstalledError


def import_tensorflow(info: RuntimeInfo | None = None) -> ModuleType:
    """Import TensorFlow, or say exactly what to install.

    Raises:
        TensorFlowNotInstalledError: TensorFlow cannot be imported.
    """
    try:
        import tensorflow as tf
    except ImportError as exc:
        if info is not None and info.is_tpu and info.in_colab:
            # Colab's TPU runtimes ship JAX, not TensorFlow, and tensorflow-tpu
            # installed there does not see the TPU (docs/DESIGN.md §2).
            fix = (
                f"This is a Colab TPU runtime ({info.signs}): it runs Keras on "
                f"JAX, and TensorFlow's TPU build installed there does not see "
                f"the TPU. Train with Keras on JAX: set "
                f"os.environ['KERAS_BACKEND'] = 'jax' before importing keras: "
                f"agent.fit, agent.run (a step on Keras' stateless API), "
                f"agent.restore with agent.callback() in your own model.fit, and "
                f"recovery from a lost TPU all work there; or use a Colab GPU "
                f"runtime (Runtime > Change runtime type), or a Cloud TPU VM with "
                f"a TensorFlow image"
            )
        elif info is not None and info.is_tpu:
            fix = (
                f"This is a TPU machine ({info.signs}); install TensorFlow's TPU "
                f"build: {tpu_install_command(None)}"
            )
        else:
            fix = "Install it with: pip install tensorflow"
        raise TensorFlowNotInstalledError(
            f"TensorFlow is not installed ({type(exc).__name__}: {exc}). {fix} ; "
            f"then {RESTART}."
        ) from exc
    return cast(ModuleType, tf)


def require_keras(install: str) -> None:
    """Import Keras 3, or say what to install.

    Args:
        install: what ``pip install`` should be given for this backend.

    Raises:
        TensorFlowNotInstalledError: Keras cannot be imported, or it is not 3.
    """
    try:
        import keras
    except ImportError as exc:
        raise TensorFlowNotInstalledError(
            f"Keras is not installed ({type(exc).__name__}: {exc}). Install it "
            f"with: pip install {install} ; then {RESTART}."
        ) from exc
    if not str(getattr(keras, "__version__", "3")).startswith("3"):
        raise TensorFlowNotInstalledError(
            f"colab_resume needs Keras 3, found Keras {keras.__version__}. "
            f"Install it with: pip install 'keras>=3' ; then {RESTART}."
        )

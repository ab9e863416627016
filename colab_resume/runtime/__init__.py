"""Find the accelerator, build the distribution strategy, rebuild it after a loss.

Importing this package does not import TensorFlow; ``connect`` does, and
detection never does.
"""

from colab_resume.runtime.accelerator import (
    Accelerator,
    Connection,
    Platform,
    connect,
    current_connection,
    reconnect,
)
from colab_resume.runtime.detect import RuntimeInfo, describe, detect
from colab_resume.runtime.errors import (
    AcceleratorError,
    AcceleratorNotFoundError,
    AcceleratorUnavailableError,
    ConnectOptionError,
    GPUSupportMissingError,
    LogicalDevicesError,
    TensorFlowNotInstalledError,
    TPUInUseError,
    TPUNameRequiredError,
    TPUSupportMissingError,
)
from colab_resume.runtime.host import VMAge, vm_age
from colab_resume.runtime.loss import is_accelerator_loss
from colab_resume.runtime.options import ConnectOptions

__all__ = [
    "Accelerator",
    "AcceleratorError",
    "AcceleratorNotFoundError",
    "AcceleratorUnavailableError",
    "ConnectOptionError",
    "ConnectOptions",
    "Connection",
    "GPUSupportMissingError",
    "LogicalDevicesError",
    "Platform",
    "RuntimeInfo",
    "TPUInUseError",
    "TPUNameRequiredError",
    "TPUSupportMissingError",
    "TensorFlowNotInstalledError",
    "VMAge",
    "connect",
    "current_connection",
    "describe",
    "detect",
    "is_accelerator_loss",
    "reconnect",
    "vm_age",
]

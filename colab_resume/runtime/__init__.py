"""The machine's facts: what runtime this is, what it has, how it fails.

Detection (a Colab TPU VM, a GPU runtime, a Cloud TPU), the VM's age and
memory, the diagnoses that turn a framework's failure into the fix, the
classification of accelerator losses and the precision policy. Connecting
to the accelerator is the framework's, in :mod:`colab_resume.backend`
(:mod:`colab_resume.backend.accelerator`). Imports no framework.
"""

from colab_resume.runtime.connection import Connection
from colab_resume.runtime.detect import RuntimeInfo, describe, detect, in_colab
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
    "AcceleratorError",
    "AcceleratorNotFoundError",
    "AcceleratorUnavailableError",
    "ConnectOptionError",
    "ConnectOptions",
    "Connection",
    "GPUSupportMissingError",
    "LogicalDevicesError",
    "RuntimeInfo",
    "TPUInUseError",
    "TPUNameRequiredError",
    "TPUSupportMissingError",
    "TensorFlowNotInstalledError",
    "VMAge",
    "describe",
    "detect",
    "in_colab",
    "is_accelerator_loss",
    "vm_age",
]

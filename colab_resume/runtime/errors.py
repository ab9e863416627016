"""Errors raised while finding and connecting to the accelerator.

Each message names what is wrong and the exact fix (a command to run, an
argument to pass), because it is what users paste into a search box. All
derive from :class:`AcceleratorError`, itself a
:class:`colab_resume.errors.ColabResumeError`.
"""

from __future__ import annotations

from colab_resume.errors import ColabResumeError


class AcceleratorError(ColabResumeError):
    """A problem finding, connecting to or rebuilding the accelerator."""


class ConnectOptionError(AcceleratorError, ValueError):
    """An argument of ``connect`` has a value we do not accept."""


class TensorFlowNotInstalledError(AcceleratorError, ImportError):
    """TensorFlow cannot be imported in this Python environment."""


class TPUSupportMissingError(AcceleratorError):
    """This is a TPU machine but the installed TensorFlow cannot drive a TPU.

    Typically ``tensorflow`` (or ``tensorflow-cpu``) was installed instead of
    ``tensorflow-tpu``, or ``libtpu`` does not match; TensorFlow then says
    "No OpKernel was registered to support Op 'ConfigureDistributedTPU'".
    """


class TPUNameRequiredError(AcceleratorError, ValueError):
    """``TPUClusterResolver`` said "Please provide a TPU Name"."""


class TPUInUseError(AcceleratorError):
    """Another process holds the TPU (libtpu's lock file).

    Attributes:
        pids: the processes found holding it (may be empty if unknown).
    """

    def __init__(self, message: str, pids: tuple[int, ...] = ()):
        super().__init__(message)
        self.pids = pids


class GPUSupportMissingError(AcceleratorError):
    """This machine has an NVIDIA GPU but TensorFlow was built without CUDA."""


class AcceleratorNotFoundError(AcceleratorError):
    """The requested kind of accelerator is not present on this machine."""


class AcceleratorUnavailableError(AcceleratorError, ConnectionError):
    """The accelerator is present but kept failing to connect within the deadline."""


class LogicalDevicesError(AcceleratorError):
    """The CPU cannot be split into the requested number of logical devices."""
